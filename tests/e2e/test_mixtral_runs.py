"""Mixtral end to end with expert parallelism (`sharding=fsdp_expert mesh.expert=2` on 4
devices): `zoo train` learns with one compile and logs the router, resumes after SIGKILL
with identical losses, its export loads in transformers with our logits, and `zoo eval` on
XLA scores as lm-eval's transformers backend does. LoRA adapters on its experts tune it on
the expert mesh with the layers scanned as the dtensor backend tunes it unrolled."""

import json

import pytest
import torch
import transformers

from tests.support.runs import (
    kill_after_first_checkpoint_then_rerun,
    losses,
    side_by_side,
    trained_run,
    zoo,
)

RUN = ["mixtral-tiny", "--tpu", "cpu-4", "--steps", "12", "sharding=fsdp_expert",
       "mesh.expert=2", "model.num_hidden_layers=2", "seq_len=64", "checkpoint_every=4",
       "log_every=1", "optim.lr=1e-3"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_run(tmp_path_factory, RUN)


def test_expert_parallel_run_learns_with_one_compile_and_logs_the_router(trained):
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["loss"] < records[0]["loss"] - 0.5
    assert records[-1]["compiles"] == 1
    for record in records:
        assert 1.0 <= record["expert_balance"] <= 4  # busiest share / mean, 4 experts
        assert 0.0 <= record["dropped_fraction"] < 1.0
        assert record["loss"] > record["lm_loss"]  # + the weighted load-balancing loss


@pytest.mark.slow  # by default qwen3moe tunes expert adapters so (tests/e2e/test_hf_families.py)
def test_expert_adapters_tune_alike_scanned_on_the_expert_mesh_and_on_dtensor(trained, tmp_path):
    """Adapters on q_proj and on every expert's weights (`gate_up_proj`, `down_proj`): only
    they are checkpointed, and the xla run (experts split over `expert`, layers scanned)
    gives the dtensor run's LM losses (the total differs in the balancing term, computed
    per process there: docs/backends.md)."""
    from core.store.checkpoint_reader import load_checkpoint

    tune = ["train", "--init-from", str(trained), "--steps", "3", "lora.rank=4", "seq_len=64",
            "lora.targets=[q_proj,gate_up_proj,down_proj]", "log_every=1", "optim.lr=1e-2"]
    side_by_side([(*tune, "--tpu", "cpu-4", "sharding=fsdp_expert", "mesh.expert=2",
                   "remat=scan", "--out", str(tmp_path / "xla")),
                  (*tune, "--backend", "dtensor", "--nproc", "2", "--out",
                   str(tmp_path / "dtensor"))])
    lm_losses = {}
    for backend in ("xla", "dtensor"):
        records = (tmp_path / backend / "metrics.jsonl").read_text().splitlines()
        lm_losses[backend] = [json.loads(line)["lm_loss"] for line in records]
    torch.testing.assert_close(lm_losses["xla"], lm_losses["dtensor"], rtol=0, atol=1e-5)
    assert lm_losses["xla"][-1] < lm_losses["xla"][0]
    saved = set(load_checkpoint(tmp_path / "xla"))
    assert "model.layers.1.mlp.experts.lora_B.down_proj" in saved
    assert all(".lora_A." in name or ".lora_B." in name for name in saved)


@pytest.mark.slow  # the same resume path as llama's (tests/e2e/test_train.py), by default
def test_sigkill_then_rerun_resumes_with_identical_losses(trained, tmp_path):
    kill_after_first_checkpoint_then_rerun(RUN, tmp_path / "run", first=4)
    assert losses(tmp_path / "run") == losses(trained)


@pytest.mark.slow  # by default every family's export loads (tests/multidevice/test_conformance.py)
def test_export_loads_in_transformers_with_our_logits(trained, tmp_path):
    from core.store.checkpoint_reader import load_checkpoint
    from zoo.mixtral.config import SIZES
    from zoo.mixtral.family import FAMILY

    exported = zoo("export", str(trained), str(tmp_path / "hf"))
    assert exported.returncode == 0, exported.stderr[-2000:]
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(theirs).__name__ == "MixtralForCausalLM"
    config = FAMILY.config_from_hf(str(tmp_path / "hf"))
    assert config.num_hidden_layers == 2 and config.hidden_size == SIZES["tiny"].hidden_size
    ours = FAMILY.build(config, init=False).eval()
    ours.load_state_dict(load_checkpoint(trained), strict=True)
    ids = torch.randint(0, config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), theirs(input_ids=ids).logits, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # llama's backends are compared by default (tests/e2e/test_eval.py)
def test_eval_on_xla_matches_lm_evals_hf_backend(trained, tmp_path):
    scores = {}
    for device in ("cpu", "xla"):
        result = zoo("eval", str(trained), "--tasks", "arc_easy_sample", "--limit", "4",
                     "--device", device, "--out", str(tmp_path / device))
        assert result.returncode == 0, result.stderr[-2000:]
        scores[device] = json.loads((tmp_path / device / "eval_results.json").read_text())
    theirs, ours = (scores[d]["loglikelihoods"]["arc_easy_sample"] for d in ("cpu", "xla"))
    # fp32 on both; our MoE evaluates dropless, as transformers' does
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs), rtol=0, atol=1e-3)
