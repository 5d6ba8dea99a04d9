"""T5 end to end: `zoo train` learns the embedded reversal task and resumes after SIGKILL
with identical losses; `zoo export` loads in transformers; `zoo eval` on XLA matches
lm-eval's seq2seq (hf) backend."""

import json

import pytest
import transformers

from tests.support.runs import kill_after_first_checkpoint_then_rerun, losses, trained_run, zoo

RUN = ["t5-tiny", "--tpu", "cpu-4", "--steps", "24", "checkpoint_every=12", "log_every=1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_run(tmp_path_factory, RUN)


def test_t5_tiny_learns_the_reversal_task(trained):
    train = losses(trained)
    assert train[24] < train[1] / 2


@pytest.mark.slow  # by default: t5 restores exactly in test_conformance, llama after SIGKILL
def test_sigkill_then_rerun_resumes_with_identical_losses(trained, tmp_path):
    kill_after_first_checkpoint_then_rerun(RUN, tmp_path / "run", first=12)
    assert losses(tmp_path / "run") == losses(trained)


@pytest.mark.slow  # by default every family's export loads (tests/multidevice/test_conformance.py)
def test_export_loads_in_transformers_and_generates(trained, tmp_path):
    exported = zoo("export", str(trained), str(tmp_path / "hf"))
    assert exported.returncode == 0, exported.stderr[-2000:]
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = tokenizer("reverse: apple stone river", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=8)
    assert out.shape[1] > 1


@pytest.mark.slow  # by default: llama's --device xla against lm-eval's (test_eval.py)
def test_eval_on_xla_matches_lm_evals_seq2seq_backend(trained, tmp_path):
    scores = {}
    for device in ("cpu", "xla"):
        result = zoo("eval", str(trained), "--tasks", "arc_easy_sample", "--limit", "8",
                     "--device", device, "--out", str(tmp_path / device))
        assert result.returncode == 0, result.stderr[-2000:]
        assert "arc_easy_sample" in result.stdout
        scores[device] = json.loads((tmp_path / device / "eval_results.json").read_text())
    hf, xla = scores["cpu"], scores["xla"]
    # fp32 on both; XLA:CPU fuses and reorders sums
    for ours, theirs in zip(xla["loglikelihoods"]["arc_easy_sample"],
                            hf["loglikelihoods"]["arc_easy_sample"], strict=True):
        assert ours == pytest.approx(theirs, abs=1e-3)
    assert xla["results"]["arc_easy_sample"]["acc,none"] == hf["results"]["arc_easy_sample"][
        "acc,none"]
