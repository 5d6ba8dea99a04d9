"""Llama: parity with transformers' LlamaForCausalLM (eager CPU and XLA:CPU, scan on/off),
every sharding x remat preset on 8 devices vs 1, and presets that fit every size."""

from pathlib import Path

import pytest
import torch
import transformers
from llama_worker import MESHES, PARITY_CONFIGS, PRESET_CONFIG, REMATS, batch, remat_preset
from xla_harness import assert_same_loss_and_grads, run_workers

from zoo.core.remat import apply_remat
from zoo.llama.family import FAMILY
from zoo.llama.hf import load_hf
from zoo.tasks.causal_lm import causal_lm_loss

HERE = Path(__file__).resolve().parent
# fp32 throughout. Eager CPU runs the same kernels as transformers: only summation order
# differs. XLA:CPU fuses and reorders more, and sharding splits reductions.
EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}
XLA_TOL = {"rtol": 1e-4, "atol": 1e-5}


def hf_reference(cfg) -> dict:
    """transformers' loss, logits and gradients for the same weights and batch."""
    ours = FAMILY.build(cfg, seed=0)
    hf = transformers.LlamaForCausalLM(cfg.to_hf()).eval()
    hf.load_state_dict(ours.state_dict(), strict=not cfg.tie_word_embeddings)
    b = batch(cfg.vocab_size)
    out = hf(input_ids=b["input_ids"], labels=b["labels"])
    out.loss.backward()
    grads = {n: p.grad for n, p in hf.named_parameters()}
    return {"loss": out.loss.detach(), "logits": out.logits.detach(), "grads": grads}


@pytest.fixture(scope="module")
def references():
    return {name: hf_reference(cfg) for name, cfg in PARITY_CONFIGS.items()}


@pytest.fixture(scope="module")
def xla_runs(tmp_path_factory):
    return run_workers(HERE / "llama_worker.py", (1, 8), tmp_path_factory.mktemp("llama"))


@pytest.mark.parametrize("remat", ["none", "checkpoint"])
@pytest.mark.parametrize("name", PARITY_CONFIGS)
def test_eager_cpu_matches_transformers(references, name, remat):
    model = FAMILY.build(PARITY_CONFIGS[name], seed=0)
    apply_remat(model, remat_preset(remat))
    b = batch(model.config.vocab_size)
    logits = model(b["input_ids"])
    loss = causal_lm_loss(logits, b["labels"])
    loss.backward()
    ref = references[name]
    torch.testing.assert_close(logits, ref["logits"], **EAGER_TOL)
    result = {"loss": loss.detach(), "grads": {n: p.grad for n, p in model.named_parameters()}}
    assert_same_loss_and_grads(result, ref, EAGER_TOL)


@pytest.mark.parametrize("remat", ["none", "scan"])
@pytest.mark.parametrize("name", PARITY_CONFIGS)
def test_xla_cpu_matches_transformers(xla_runs, references, name, remat):
    result = xla_runs[1]["results"][("parity", name, remat)]
    torch.testing.assert_close(result["logits"], references[name]["logits"], **XLA_TOL)
    assert_same_loss_and_grads(result, references[name], XLA_TOL)
    assert result["hlo_has_scan"] == (remat == "scan")


@pytest.mark.parametrize("remat", REMATS)
@pytest.mark.parametrize("preset", MESHES)
def test_presets_on_8_devices_match_1_device(xla_runs, preset, remat):
    reference = xla_runs[1]["results"][("preset", "fsdp", "none")]
    result = xla_runs[8]["results"][("preset", preset, remat)]
    assert_same_loss_and_grads(result, reference, XLA_TOL)
    for name, planned in result["planned_shards"].items():
        assert result["actual_shards"][name] == {planned}, name
    assert result["hlo_has_scan"] == remat.startswith("scan")


def test_fsdp_tensor_layout_on_8_devices(xla_runs):
    specs = xla_runs[8]["results"][("preset", "fsdp_tensor", "none")]["specs"]
    # mesh fsdp=4 x tensor=2: column-parallel q_proj has tensor on its output rows.
    assert specs["model.layers.0.self_attn.q_proj.weight"] == "{devices=[2,4]0,2,4,6,1,3,5,7}"
    assert specs["model.layers.0.self_attn.o_proj.weight"] == "{devices=[4,2]0,1,2,3,4,5,6,7}"
    assert specs["model.norm.weight"] == "{replicated}"


def test_hf_checkpoint_directory_loads(tmp_path):
    cfg = PRESET_CONFIG
    hf = transformers.LlamaForCausalLM(cfg.to_hf()).eval()
    hf.save_pretrained(tmp_path)
    model = FAMILY.build(FAMILY.config_from_hf(str(tmp_path)), init=False)
    load_hf(model, str(tmp_path))
    ids = batch(cfg.vocab_size)["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(input_ids=ids).logits, **EAGER_TOL)
