"""DeepSeek-V3: parity with transformers' DeepseekV3ForCausalLM (loss, logits, every
gradient; eager CPU and XLA:CPU), the presets on 8 devices vs 1, the router against
transformers' with a routing bias as training leaves it, and both checkpoint layouts."""

import pytest
import torch
from safetensors.torch import save_file

from core.errors import UserError
from tests.support import deepseek3_cases
from tests.support.deepseek3_cases import SMALL, batch
from tests.support.family_presets import CausalLMPresetTests
from tests.support.hub_layouts import experts_apart
from zoo.deepseek3.family import FAMILY
from zoo.deepseek3.moe import SigmoidGroupRouter

EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}


class TestPresets(CausalLMPresetTests):
    cases = deepseek3_cases
    eager_tol = EAGER_TOL
    # the dense layer runs before the scan, checkpointed
    barrier_remats = ("checkpoint", "scan_checkpoint")


def test_router_picks_and_weighs_as_transformers_with_a_bias():
    """Groups by their two best biased scores, experts by biased score within the best
    groups, weights from the unbiased scores, renormalised and scaled."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    config = SMALL
    ours = SigmoidGroupRouter(config)
    theirs = DeepseekV3TopkRouter(config.to_hf())
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(ours.weight.shape, generator=generator))
        ours.e_score_correction_bias.copy_(torch.rand(config.num_local_experts,
                                                      generator=generator))
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 5, config.hidden_size, generator=generator)
    _, experts, weights = ours(x)
    _, their_weights, their_experts = theirs(x)
    ours_sorted, order = experts.reshape(-1, config.num_experts_per_tok).sort(-1)
    theirs_sorted, their_order = their_experts.sort(-1)
    assert torch.equal(ours_sorted, theirs_sorted)
    torch.testing.assert_close(weights.reshape(-1, config.num_experts_per_tok).gather(-1, order),
                               their_weights.gather(-1, their_order))


def test_hub_layout_loads_and_its_prediction_layer_is_left_out(tmp_path):
    """DeepSeek's Hub checkpoints: each expert apart, and layer num_hidden_layers (multi-token
    prediction) beside the model's."""
    hf = TestPresets.hf_model(SMALL)
    hub = experts_apart(hf.state_dict())
    hub[f"model.layers.{SMALL.num_hidden_layers}.eh_proj.weight"] = torch.zeros(2, 2)
    save_file(hub, str(tmp_path / "model.safetensors"))
    hf.config.save_pretrained(tmp_path)
    model = FAMILY.build(FAMILY.config_from_hf(str(tmp_path)), init=False).eval()
    FAMILY.load_hf(model, str(tmp_path))
    ids = batch()["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(input_ids=ids).logits, **EAGER_TOL)


def test_fp8_checkpoints_are_refused_in_one_line(tmp_path):
    config = SMALL.to_hf()
    config.quantization_config = {"quant_method": "fp8"}
    config.save_pretrained(tmp_path)
    with pytest.raises(UserError, match=r"^\S+ holds fp8 weights; convert them to bf16 first"):
        FAMILY.config_from_hf(str(tmp_path))
