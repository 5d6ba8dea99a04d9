"""ViT: parity with transformers' ViTForImageClassification (eager CPU and XLA:CPU, scan
on/off), every sharding x remat preset on 8 devices vs 1, and loading transformers 4
checkpoints."""

import torch
import transformers

from tests.support import vit_cases
from tests.support.family_presets import FamilyPresetTests
from tests.support.vit_cases import CONFIG, batch
from zoo.vit.family import FAMILY
from zoo.vit.hf import load_hf

# fp32; eager CPU runs the same kernels as transformers.
EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}


class TestPresets(FamilyPresetTests):
    cases = vit_cases
    eager_tol = EAGER_TOL

    @staticmethod
    def hf_reference(config) -> dict:
        """transformers' logits, loss and gradients for the same weights and batch."""
        ours = FAMILY.build(config, seed=0)
        hf = transformers.ViTForImageClassification(config.to_hf()).eval()
        hf.load_state_dict(ours.state_dict(), strict=True)
        b = batch()
        out = hf(pixel_values=b["pixel_values"], labels=b["labels"])
        out.loss.backward()
        return {"loss": out.loss.detach(), "logits": out.logits.detach(),
                "grads": {n: p.grad for n, p in hf.named_parameters()}}

    def test_fsdp_tensor_layout_on_8_devices(self, xla_runs):
        specs = xla_runs[8]["presets"][("fsdp_tensor", "checkpoint")]["specs"]
        # mesh fsdp=4 x tensor=2: column-parallel q_proj has tensor on its output rows.
        assert specs["vit.layers.0.attention.q_proj.weight"] == "{devices=[2,4]0,2,4,6,1,3,5,7}"
        assert specs["vit.layers.0.mlp.fc2.weight"] == "{devices=[4,2]0,1,2,3,4,5,6,7}"
        assert specs["vit.layernorm.weight"] == "{replicated}"


def test_transformers_4_checkpoints_load(tmp_path):
    """Hub checkpoints use the transformers 4 names (encoder.layer.N.attention.attention...)."""
    from safetensors.torch import save_file

    from zoo.vit.hf import LEGACY_NAMES

    hf = transformers.ViTForImageClassification(CONFIG.to_hf()).eval()
    hf.config.save_pretrained(tmp_path)
    old = {}
    for name, value in hf.state_dict().items():
        name = name.replace("vit.layers.", "vit.encoder.layer.")
        for current, legacy in ((".attention.q_proj.", ".attention.attention.query."),
                                (".attention.k_proj.", ".attention.attention.key."),
                                (".attention.v_proj.", ".attention.attention.value."),
                                (".attention.o_proj.", ".attention.output.dense."),
                                (".mlp.fc1.", ".intermediate.dense."),
                                (".mlp.fc2.", ".output.dense.")):
            name = name.replace(current, legacy)
        old[name] = value.contiguous()
    assert len(LEGACY_NAMES) == 7 and "vit.encoder.layer.0.attention.attention.query.weight" in old
    save_file(old, str(tmp_path / "model.safetensors"))
    model = FAMILY.build(FAMILY.config_from_hf(str(tmp_path)), init=False)
    load_hf(model, str(tmp_path))
    pixels = batch()["pixel_values"]
    with torch.no_grad():
        torch.testing.assert_close(model(pixels), hf(pixel_values=pixels).logits, **EAGER_TOL)
