"""T5: parity with transformers' T5ForConditionalGeneration (eager CPU and XLA:CPU, scan
on/off), every sharding x remat preset on 8 devices vs 1, and loading a transformers
checkpoint directory."""

import torch

from tests.support import t5_cases
from tests.support.family_presets import FamilyPresetTests
from tests.support.t5_cases import CONFIG, batch, forward, hf_model
from zoo.t5.family import FAMILY
from zoo.t5.hf import load_hf

# fp32; eager CPU runs the same kernels as transformers.
EAGER_TOL = {"rtol": 1e-5, "atol": 1e-5}


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
