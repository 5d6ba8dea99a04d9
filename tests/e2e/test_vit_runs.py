"""ViT end to end: `zoo train` learns the embedded pattern set and resumes after SIGKILL
with identical losses; `zoo export` loads in transformers and `zoo eval` gives the run's
top-1."""

import json

import pytest
import transformers

from tests.support.runs import kill_after_first_checkpoint_then_rerun, losses, trained_run, zoo

RUN = ["vit-tiny", "--tpu", "cpu-4", "--steps", "40", "eval_every=20", "checkpoint_every=20",
       "log_every=1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_run(tmp_path_factory, RUN)


def test_vit_tiny_learns_the_pattern_set(trained):
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    top1 = [r["val_top1"] for r in records if "val_top1" in r]
    train = losses(trained)
    assert train[40] < train[1] - 0.5
    assert len(top1) == 2 and top1[-1] > max(0.5, top1[0])  # chance is 1/6
    assert max(r.get("compiles", 0) for r in records) <= 2  # evaluation does not recompile


@pytest.mark.slow  # by default: vit restores exactly in test_conformance, llama after SIGKILL
def test_sigkill_then_rerun_resumes_with_identical_losses(trained, tmp_path):
    kill_after_first_checkpoint_then_rerun(RUN, tmp_path / "run", first=20)
    assert losses(tmp_path / "run") == losses(trained)


@pytest.mark.slow  # by default: vit matches transformers' ViT (test_vit_presets.py)
def test_export_and_eval_top1(trained, tmp_path):
    exported = zoo("export", str(trained), str(tmp_path / "hf"))
    assert exported.returncode == 0, exported.stderr[-2000:]
    model = transformers.ViTForImageClassification.from_pretrained(tmp_path / "hf")
    assert model.config.id2label[0] == "checker"
    assert (tmp_path / "hf" / "preprocessor_config.json").is_file()
    scored = zoo("eval", str(trained), "--out", str(tmp_path / "eval"))
    assert scored.returncode == 0, scored.stderr[-2000:]
    record = json.loads((tmp_path / "eval" / "eval_results.json").read_text())
    last = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert record["top1"] == pytest.approx(last[-1]["val_top1"], abs=1e-6)
    assert "top1" in scored.stdout
