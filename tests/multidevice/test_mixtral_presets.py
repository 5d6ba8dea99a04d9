"""Mixtral: parity with transformers' MixtralForCausalLM (loss with the load-balancing term,
logits, every gradient) for both dispatches (eager CPU and XLA:CPU, scan on/off), every
sharding x remat preset on 8 devices vs 1 (expert parallelism included), dropping under
capacity dispatch, and loading both checkpoint layouts."""

import dataclasses

import pytest
import torch
from safetensors.torch import save_file

from tests.support import mixtral_cases
from tests.support.family_presets import CausalLMPresetTests
from tests.support.mixtral_cases import CONFIG, PARITY_CONFIGS, batch
from zoo.mixtral.family import FAMILY
from zoo.mixtral.hf import load_hf

EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}


class TestPresets(CausalLMPresetTests):
    cases = mixtral_cases
    eager_tol = EAGER_TOL
    hf_settings = {"output_router_logits": True}  # the loss adds the balancing term

    def test_fsdp_expert_layout_on_8_devices(self, xla_runs):
        specs = xla_runs[8]["presets"][("fsdp_expert", "checkpoint")]["specs"]
        # mesh fsdp=4 x expert=2: experts split in two halves, their features in four.
        assert specs["model.layers.0.mlp.experts.gate_up_proj"].startswith("{devices=[2,4,1]")
        assert specs["model.layers.0.self_attn.q_proj.weight"].startswith("{devices=[8,1]")
        assert specs["model.layers.0.mlp.gate.weight"] == "{replicated}"


def test_capacity_dispatch_drops_the_overflow_and_dense_or_eval_drop_nothing():
    ids = batch()["input_ids"]
    tight = dataclasses.replace(CONFIG, capacity_factor=0.5)
    with torch.no_grad():
        dense_config = dataclasses.replace(CONFIG, dispatch="dense")
        _, dense = FAMILY.build(dense_config).forward_with_router(ids)
        _, dropless = FAMILY.build(PARITY_CONFIGS["capacity"]).forward_with_router(ids)
        _, dropping = FAMILY.build(tight).forward_with_router(ids)
        _, evaluating = FAMILY.build(tight).eval().forward_with_router(ids)
    assert float(dense.dropped_fraction) == 0 and float(dropless.dropped_fraction) == 0
    assert float(evaluating.dropped_fraction) == 0
    # capacity 8 of 32 tokens x 2 choices / 4 experts = 16 fair share: at least half dropped
    assert float(dropping.dropped_fraction) >= 0.5
    assert 1.0 <= float(dense.balance) <= CONFIG.num_local_experts  # busiest share / mean


def test_aux_loss_equals_transformers_load_balancing_loss():
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    config = PARITY_CONFIGS["capacity"]
    ids = batch()["input_ids"]
    with torch.no_grad():
        _, router = FAMILY.build(config, seed=0).forward_with_router(ids)
        out = TestPresets.hf_model(config)(input_ids=ids)
    expected = load_balancing_loss_func(out.router_logits, config.num_local_experts,
                                        config.num_experts_per_tok)
    torch.testing.assert_close(router.aux_loss, expected, **EAGER_TOL)


@pytest.mark.parametrize("layout", ["stacked", "per_expert"])
def test_hf_checkpoint_directory_loads(tmp_path, layout):
    """transformers' own save (stacked experts) and the Hub's per-expert layout
    (block_sparse_moe.experts.<e>.w1/w2/w3) both load."""
    config = PARITY_CONFIGS["capacity"]
    hf = TestPresets.hf_model(config)
    hf.save_pretrained(tmp_path)
    if layout == "per_expert":
        (tmp_path / "model.safetensors").unlink()
        save_file(per_expert_state(hf.state_dict()), tmp_path / "model.safetensors")
    model = FAMILY.build(FAMILY.config_from_hf(str(tmp_path)), init=False).eval()
    load_hf(model, str(tmp_path))
    ids = batch()["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(input_ids=ids).logits, **EAGER_TOL)


def per_expert_state(state: dict) -> dict:
    """transformers 5's stacked expert tensors in the Hub's original per-expert names."""
    out = {}
    for name, value in state.items():
        name = name.replace(".mlp.", ".block_sparse_moe.")
        if name.endswith("experts.gate_up_proj"):
            prefix = name.removesuffix("gate_up_proj")
            for e, gate_up in enumerate(value):
                w1, w3 = gate_up.chunk(2)
                out[f"{prefix}{e}.w1.weight"], out[f"{prefix}{e}.w3.weight"] = w1, w3
        elif name.endswith("experts.down_proj"):
            prefix = name.removesuffix("down_proj")
            for e, down in enumerate(value):
                out[f"{prefix}{e}.w2.weight"] = down
        else:
            out[name] = value
    return {k: v.contiguous() for k, v in out.items()}
