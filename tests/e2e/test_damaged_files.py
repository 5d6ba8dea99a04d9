"""Files zoo reads back, damaged as a kill, a full disk or a hand edit leaves them: the run
folder's config and metrics, checkpoint manifests and shards, the location's owner record,
and the export cache. Each gives one line and a non-zero exit, or is repaired; never a
traceback. Each case damages its own copy of one trained run; the commands are forks of one
process that has imported the CLI (tests/support/forked_cli.py). (Metrics cut short, the W&B
id and the token cache: tests/unit/test_damaged_state.py.)"""

import json
import shutil
from pathlib import Path

import pytest

from tests.support.runs import forked_zoo, saved_config, snapshot, zoo

STEP = "checkpoints/step-00000002"
EXPORT = "hf/step-00000002"


def write(name: str, text: str):
    return lambda run: (run / name).write_text(text)


def write_config(text: str):
    return write("config.yaml", saved_config(text))


def cut_between_keys(run: Path):
    """config.yaml cut at a line between two top-level keys, halfway: still valid YAML, a
    shorter config whose missing keys would take their defaults."""
    lines = (run / "config.yaml").read_text().splitlines(keepends=True)
    tops = [i for i, line in enumerate(lines) if i and line[:1].isalpha()]
    (run / "config.yaml").write_text("".join(lines[:tops[len(tops) // 2]]))


def truncate(name: str, size: int):
    def damage(run: Path):
        with open(run / name, "r+b") as file:
            file.truncate(size)
    return damage


def edit_config(old: str, new: str):
    def damage(run: Path):
        text = (run / "config.yaml").read_text()
        assert old in text
        (run / "config.yaml").write_text(text.replace(old, new))
    return damage


def forget_run_id(run: Path):
    """The run-id of the run that owns its checkpoints deleted (the owner record names this
    very folder: the copy stands in for the original)."""
    owner = run / "checkpoints" / "owner.json"
    owner.write_text(json.dumps({**json.loads(owner.read_text()), "out": str(run)}))
    (run / "run-id").unlink()


def half_export(run: Path):
    (run / EXPORT).mkdir(parents=True)
    (run / EXPORT / "config.json").write_text("{}")  # its weights never arrived


CUT_SHORT = ("config.yaml is damaged (cut short: it does not end with the line zoo writes "
             "last, '# end of zoo run config'); restore it from a copy")
# (name, damage, command (RUN: the damaged copy), exit code, the line stderr ends with)
CASES = [
    ("config_not_yaml", write_config("steps: [1, 2\n"), ["export", "RUN", "RUN-hf"],
     1, "config.yaml is not valid YAML at line 3: expected ',' or ']'"),
    ("config_a_list", write_config("- 1\n"), ["generate", "RUN", "--prompt", "hi"],
     1, "config.yaml holds a list, not keys and values"),
    ("config_no_model", write_config("steps: 3\n"), ["export", "RUN", "RUN-hf"],
     1, "config.yaml names no model (model_name); it is not a zoo run config"),
    ("config_unknown_key", write_config("model_name: llama-tiny\nnosuch: 1\n"),
     ["eval", "RUN", "--tasks", "arc_easy_sample"], 1,
     "config.yaml: unknown config key 'nosuch'"),
    ("manifest", write(f"{STEP}/manifest.json", "{"), ["export", "RUN", "RUN-hf"], 1,
     "manifest.json is not readable; use an older checkpoint of the run"),
    ("shard", truncate(f"{STEP}/__0_0.distcp", 100), ["export", "RUN", "RUN-hf"], 1,
     "__0_0.distcp is 100 bytes"),
    ("owner", write("checkpoints/owner.json", "{"),
     ["train", "llama-tiny", "--steps", "3", "--out", "RUN"], 1,
     "owner.json is damaged (not JSON: Expecting property name"),
    ("owner_a_list", write("checkpoints/owner.json", "[]"),
     ["train", "llama-tiny", "--steps", "3", "--out", "RUN"], 1,
     "owner.json is damaged (a JSON list, not an object); if no run is writing"),
    ("run_id_deleted", forget_run_id, ["train", "llama-tiny", "--steps", "3", "--out", "RUN"],
     1, "run-id is missing (deleted?); if this is that run, restore it with `echo "),
    ("config_edited", edit_config("hidden_size: 256", "hidden_size: 128"),
     ["export", "RUN", "RUN-hf"], 1,
     "does not fit the model its run's config describes ('lm_head.weight' has shape "
     "[4096, 256] in the checkpoint but [4096, 128] in the model)"),
    ("config_edited_generate", edit_config("num_hidden_layers: 4", "num_hidden_layers: 3"),
     ["generate", "RUN", "--prompt", "hi"], 1,
     "is in the checkpoint but not in the model); was the run's config edited"),
    *((f"config_cut_{command[0]}", cut_between_keys, command, 1, CUT_SHORT) for command in (
        ["export", "RUN", "RUN-hf"], ["generate", "RUN", "--prompt", "hi"],
        ["train", "llama-tiny", "--steps", "3", "--out", "RUN"])),
    ("half_export", half_export, ["eval", "RUN", "--tasks", "arc_easy_sample", "--limit", "2"],
     0, None),
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged")
    result = zoo("train", "llama-tiny", "--steps", "2", "checkpoint_every=2", "--out",
                 str(root / "run"))
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "run"


@pytest.fixture(scope="module")
def answers(trained):
    """Each case's command on its own damaged copy of the run, name -> result (with
    `unchanged`: whether the copy's files are as the damage left them, and nothing was
    written beside it)."""
    commands, before = [], {}
    for name, damage, command, _, _ in CASES:
        run = trained.parent / name
        shutil.copytree(trained, run)
        damage(run)
        before[name] = snapshot(run)
        commands.append([arg.replace("RUN", str(run)) for arg in command])
    results = forked_zoo(commands)
    return {case[0]: {**result, "unchanged": snapshot(trained.parent / case[0]) == before[
        case[0]] and not (trained.parent / f"{case[0]}-hf").exists()}
        for case, result in zip(CASES, results)}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_damaged_file_gives_one_line(answers, case):
    name, _, _, code, line = case
    result = answers[name]
    assert result["returncode"] == code, result["stderr"][-3000:]
    assert "Traceback" not in result["stderr"] + result["stdout"]
    said = [text for text in result["stderr"].splitlines()
            if text.startswith(("Error:", "warning:"))]
    if line is None:
        assert said == []
    else:
        assert len(said) == 1 and line in said[0], said


@pytest.mark.parametrize("command", ["export", "generate", "train"])
def test_a_config_cut_between_keys_is_refused_with_nothing_written(answers, command):
    """A config.yaml cut at a line between two keys is valid YAML; the line zoo writes last
    tells it from a whole one, so export, generate and a resume refuse it (the line:
    CASES) instead of reading a shorter config, and write nothing."""
    assert answers[f"config_cut_{command}"]["unchanged"]
