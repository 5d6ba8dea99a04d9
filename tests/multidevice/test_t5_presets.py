"""T5: parity with transformers' T5ForConditionalGeneration (eager CPU and XLA:CPU, scan
on/off), every sharding x remat preset on 8 devices vs 1, and loading a transformers
checkpoint directory."""

import torch
import transformers

from tests.support import t5_cases
from tests.support.family_presets import FamilyPresetTests
from tests.support.t5_cases import CONFIG, batch, forward
from zoo.t5.family import FAMILY
from zoo.t5.hf import EMBEDDING_ALIASES, load_hf

# fp32; eager CPU runs the same kernels as transformers.
EAGER_TOL = {"rtol": 1e-5, "atol": 1e-5}


def hf_model(ours, config=CONFIG):
    """transformers' T5 with our weights. transformers 5 ties T5's LM head to the embedding
    when built from a config (it unties on loading a checkpoint that has both), so untie it
    here: T5 v1.1 has a separate head."""
    hf = transformers.T5ForConditionalGeneration(config.to_hf()).eval()
    hf.lm_head.weight = torch.nn.Parameter(torch.empty_like(hf.lm_head.weight))
    state = ours.state_dict()
    hf.load_state_dict({**state, **{alias: state["shared.weight"] for alias in EMBEDDING_ALIASES}})
    return hf


class TestPresets(FamilyPresetTests):
    cases = t5_cases
    eager_tol = EAGER_TOL
    # block 0 runs outside the scan, checkpointed
    barrier_remats = ("checkpoint", "scan_checkpoint")

    @staticmethod
    def hf_reference(config) -> dict:
        hf = hf_model(FAMILY.build(config, seed=0), config)
        out = hf(**batch())
        out.loss.backward()
        grads = {n: p.grad for n, p in hf.named_parameters()}
        return {"loss": out.loss.detach(), "logits": out.logits.detach(), "grads": grads}

    def test_fsdp_tensor_layout_on_8_devices(self, xla_runs):
        specs = xla_runs[8]["presets"][("fsdp_tensor", "checkpoint")]["specs"]
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
