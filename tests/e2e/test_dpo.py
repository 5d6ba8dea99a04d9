"""`zoo train --init-from RUN task=dpo` as a user runs it, on the shipped preference set:
with LoRA adapters (the reference is the model with them off) and as a full tune (the
reference a frozen copy beside it), side by side. At step 1 the policy is its reference:
the loss is ln 2 and the rewards 0; the run logs the rewards, their margin and accuracy."""

import json
import math

import pytest

from tests.support.runs import zoo

TUNE = ["task=dpo", "--steps", "2", "log_every=1", "seq_len=128", "checkpoint_every=2",
        "--tpu", "cpu-2"]
RUNS = {"lora": ["lora.rank=8"], "full": []}


@pytest.fixture(scope="module")
def tuned(pretrained_run, tmp_path_factory):
    """Each way of tuning, once it is asked for."""
    folder, found = tmp_path_factory.mktemp("dpo"), {}

    def run(name):
        if name not in found:
            result = zoo("train", "--init-from", str(pretrained_run), *TUNE, *RUNS[name],
                         "--out", str(folder / name))
            assert result.returncode == 0, result.stderr[-3000:]
            found[name] = (folder / name, result)
        return found[name]

    return run


# by default with LoRA; the frozen copy's placement is the engine's (core/engine.py)
@pytest.mark.parametrize("name", ["lora", pytest.param("full", marks=pytest.mark.slow)])
def test_step_one_compares_the_model_with_itself(tuned, name):
    out, result = tuned(name)
    assert "dpo data: zoo/assets/preferences/train.jsonl (chat, 2,000 rows" in result.stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    first = next(r for r in records if r.get("step") == 1 and "loss" in r)
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-4)
    for key in ("rewards_chosen", "rewards_rejected", "reward_margin"):
        assert first[key] == pytest.approx(0.0, abs=1e-5)
    assert first["reward_accuracy"] == 0.0  # a tie is no win, as in TRL
    second = next(r for r in records if r.get("step") == 2 and "loss" in r)
    assert second["reward_margin"] != 0.0  # the first update moved the policy
