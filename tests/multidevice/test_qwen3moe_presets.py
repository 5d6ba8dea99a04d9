"""Qwen3-MoE: parity with transformers' Qwen3MoeForCausalLM (loss with the load-balancing
term, logits, every gradient; eager CPU and XLA:CPU, scan on/off), the presets on 8 devices
vs 1, and loading both checkpoint layouts (stacked, and the Hub's expert by expert)."""

import torch
from safetensors.torch import save_file

from tests.support import qwen3moe_cases
from tests.support.family_presets import CausalLMPresetTests
from tests.support.hub_layouts import experts_apart
from tests.support.qwen3moe_cases import CONFIG, batch
from zoo.qwen3moe.family import FAMILY

EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}


class TestPresets(CausalLMPresetTests):
    cases = qwen3moe_cases
    eager_tol = EAGER_TOL
    hf_settings = {"output_router_logits": True}  # the loss adds the balancing term


def test_both_checkpoint_layouts_load(tmp_path):
    """transformers' own folder (stacked experts) and the Hub's layout, each expert's
    gate_proj, up_proj and down_proj apart."""
    hf = TestPresets.hf_model(CONFIG)
    hf.save_pretrained(tmp_path / "stacked")
    hub = experts_apart(hf.state_dict())
    (tmp_path / "hub").mkdir()
    save_file(hub, str(tmp_path / "hub" / "model.safetensors"))
    config_json = (tmp_path / "stacked" / "config.json").read_text()
    (tmp_path / "hub" / "config.json").write_text(config_json)
    ids = batch()["input_ids"]
    with torch.no_grad():
        expected = hf(input_ids=ids).logits
        for layout in ("stacked", "hub"):
            config = FAMILY.config_from_hf(str(tmp_path / layout))
            model = FAMILY.build(config, init=False).eval()
            FAMILY.load_hf(model, str(tmp_path / layout))
            torch.testing.assert_close(model(ids), expected, **EAGER_TOL)
