"""A task picked with `task=NAME` registers itself as a family does (zoo/registry.py): a toy
task in a temporary package, named by ZOO_TASKS or by an installed package's `zoo.tasks`
entry point, trains llama-tiny with no edit outside that package; and the in-tree ones (sft,
dpo) are found by their `VARIANT`, with no list naming them."""

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT
from tests.support.runs import zoo_command

# the toy: the family's next-token loss times 3, its plain value logged beside the loss
TOY_TASK = '''
from zoo.tasks.causal_lm import CausalLM
from zoo.tasks.variant import TaskVariant, on_top_of


class Toy(CausalLM):
    name = "toy"

    def loss(self, model, batch):
        lm_loss, aux = super().loss(model, batch)
        return 3 * lm_loss, {**aux, "toy_lm_loss": lm_loss.detach()}


VARIANT = TaskVariant(builds_on=CausalLM,
                      build=lambda family_task, family: on_top_of(family_task, Toy)())
'''


@pytest.fixture
def toy_package(tmp_path):
    """tmp_path holding the package `toy_tasks` with the toy task's module."""
    package = tmp_path / "toy_tasks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "toy.py").write_text(TOY_TASK)
    return tmp_path


def env(path, **variables):
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT)]),
            "TF_CPP_MIN_LOG_LEVEL": "2", "ZOO_TASKS": "", **variables}


def test_a_toy_task_named_by_zoo_tasks_trains_its_own_loss(toy_package):
    out = toy_package / "run"
    result = subprocess.run(
        zoo_command("train", "llama-tiny", "task=toy", "--tpu", "cpu-1", "--steps", "2",
                    "--out", str(out), "model.num_hidden_layers=2", "seq_len=64",
                    "log_every=1", "data.source=synthetic"),
        env=env(toy_package, ZOO_TASKS="toy=toy_tasks.toy"), cwd=ROOT, capture_output=True,
        text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "task: toy" in (out / "config.yaml").read_text()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "loss" in r]
    assert [r["step"] for r in trained] == [1, 2]
    for record in trained:
        assert record["loss"] == pytest.approx(3 * record["toy_lm_loss"], rel=1e-5)


def test_an_installed_package_registers_its_task_by_entry_point(toy_package):
    info = toy_package / "toy_tasks_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-tasks-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[zoo.tasks]\ntoy = toy_tasks.toy\n")
    code = ("from zoo.registry import family\n"
            "task = family('mixtral').task_named('toy')\n"
            "print(task.name, [c.__name__ for c in type(task).__mro__[:3]])")
    result = subprocess.run([sys.executable, "-c", code], env=env(toy_package), cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # over the family's own task: a mixture of experts' toy keeps its router loss beneath
    assert result.stdout.strip() == "toy ['Toy', 'Toy', 'MoECausalLM']"


def test_the_in_tree_variants_are_found_by_their_declaration(monkeypatch):
    from zoo import registry

    monkeypatch.delenv("ZOO_TASKS", raising=False)
    registry.task_modules.cache_clear()
    found = registry.task_modules()
    assert {"sft": "zoo.tasks.sft", "dpo": "zoo.tasks.dpo",
            "grpo": "zoo.tasks.grpo"}.items() <= found.items()
    assert "causal_lm" not in found and "variant" not in found and "grpo_objective" not in found
    assert list(registry.variants_for(registry.family("llama").task)) == ["sft", "dpo", "grpo"]
    assert registry.variants_for(registry.family("vit").task) == {}
    registry.task_modules.cache_clear()
