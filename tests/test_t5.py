"""T5: parity with transformers' T5ForConditionalGeneration (eager CPU and XLA:CPU, scan
on/off), every sharding x remat preset on 8 devices vs 1, FLOPs, the pair pipeline, and
`zoo train` / `zoo export` / `zoo eval` (hf and XLA backends) end to end on the embedded task."""

import json

import pytest
import t5_cases
import torch
import transformers
from family_presets import FamilyPresetTests
from t5_cases import CONFIG, batch, forward
from test_train import kill_after_first_checkpoint_then_rerun, losses, trained_run, zoo

from zoo.t5.family import FAMILY
from zoo.t5.hf import EMBEDDING_ALIASES, load_hf
from zoo.tasks.seq2seq import PairBatches, Seq2SeqTrainConfig, encode

# fp32; eager CPU runs the same kernels as transformers.
EAGER_TOL = {"rtol": 1e-5, "atol": 1e-5}


def hf_model(ours):
    """transformers' T5 with our weights. transformers 5 ties T5's LM head to the embedding
    when built from a config (it unties on loading a checkpoint that has both), so untie it
    here: T5 v1.1 has a separate head."""
    hf = transformers.T5ForConditionalGeneration(CONFIG.to_hf()).eval()
    hf.lm_head.weight = torch.nn.Parameter(torch.empty_like(hf.lm_head.weight))
    state = ours.state_dict()
    hf.load_state_dict({**state, **{alias: state["shared.weight"] for alias in EMBEDDING_ALIASES}})
    return hf


@pytest.fixture(scope="module")
def reference():
    hf = hf_model(FAMILY.build(CONFIG, seed=0))
    out = hf(**batch())
    out.loss.backward()
    grads = {n: p.grad for n, p in hf.named_parameters()}
    return {"loss": out.loss.detach(), "logits": out.logits.detach(), "grads": grads}


class TestPresets(FamilyPresetTests):
    cases = t5_cases
    eager_tol = EAGER_TOL
    # block 0 runs outside the scan, checkpointed
    barrier_remats = ("checkpoint", "scan_checkpoint")

    def test_fsdp_tensor_layout_on_8_devices(self, xla_runs):
        specs = xla_runs[8]["results"][("fsdp_tensor", "none")]["specs"]
        # mesh fsdp=4 x tensor=2: column-parallel q has tensor on its output rows.
        assert specs["encoder.block.0.layer.0.SelfAttention.q.weight"] == (
            "{devices=[2,4]0,2,4,6,1,3,5,7}")
        assert specs["decoder.block.1.layer.2.DenseReluDense.wo.weight"] == (
            "{devices=[4,2]0,1,2,3,4,5,6,7}")


def test_hf_checkpoint_directory_loads(tmp_path):
    hf = hf_model(FAMILY.build(CONFIG, seed=3))
    hf.save_pretrained(tmp_path)
    model = FAMILY.build(FAMILY.config_from_hf(str(tmp_path)), init=False)
    load_hf(model, str(tmp_path))
    with torch.no_grad():
        torch.testing.assert_close(forward(model, batch())[1], hf(**batch()).logits, **EAGER_TOL)


def test_pairs_are_encoded_with_eos_padding_and_masked_labels():
    from zoo.core.data import load_tokenizer

    tokenizer = load_tokenizer("default")
    rows = encode(["reverse: apple stone", "x " * 50], tokenizer, 8)
    assert rows.shape == (2, 8) and rows[1, -1] == tokenizer.eos_token_id  # truncated + EOS
    config = Seq2SeqTrainConfig(global_batch_size=4)
    host = [PairBatches(config, tokenizer, 4096, k, 2).batch(7) for k in (0, 1)]
    whole = PairBatches(config, tokenizer, 4096, 0, 1).batch(7)
    assert torch.equal(torch.cat([h["labels"] for h in host]), whole["labels"])
    pad = tokenizer.pad_token_id
    shifted = torch.where(whole["labels"] == -100, pad, whole["labels"])[:, :-1]
    assert torch.equal(whole["decoder_input_ids"][:, 1:], shifted)  # teacher forcing
    assert (whole["decoder_input_ids"][:, 0] == pad).all()  # T5 starts from pad


RUN = ["t5-tiny", "--tpu", "cpu-4", "--steps", "24", "checkpoint_every=12", "log_every=1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_run(tmp_path_factory, RUN)


def test_t5_tiny_learns_the_reversal_task(trained):
    train = losses(trained)
    assert train[24] < train[1] / 2


def test_sigkill_then_rerun_resumes_with_identical_losses(trained, tmp_path):
    kill_after_first_checkpoint_then_rerun(RUN, tmp_path / "run", first=12)
    assert losses(tmp_path / "run") == losses(trained)


def test_export_loads_in_transformers_and_generates(trained, tmp_path):
    exported = zoo("export", str(trained), str(tmp_path / "hf"))
    assert exported.returncode == 0, exported.stderr[-2000:]
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = tokenizer("reverse: apple stone river", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=8)
    assert out.shape[1] > 1


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
