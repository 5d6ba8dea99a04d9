"""LoRA adapters (core/lora.py) against peft's own: our llama with adapters on every linear
layer (o_proj, which takes heads, included) gives the logits of transformers'
LlamaForCausalLM with peft's LoRA on the same weights (fp32, 1e-5), and its merged weights
give them too; adapters are sharded as their base weights; bad targets are refused."""

import dataclasses

import pytest
import torch

from core import lora
from core.errors import UserError
from core.sharding import ShardingError, ShardingRules, plan_params
from zoo.registry import family

EVERY_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CONFIG = lora.LoraConfig(rank=4, alpha=8.0, targets=EVERY_LINEAR)


def tiny_llama(init=True):
    fam = family("llama")
    config = dataclasses.replace(fam.sizes["tiny"], num_hidden_layers=2, attention="plain")
    return fam, config, fam.build(config, init=init, seed=0).eval()


def trained_adapters(model):
    """Adapters as training leaves them: B no longer zero."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)


@pytest.fixture(scope="module")
def adapted():
    fam, config, model = tiny_llama()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    names = lora.add_adapters(model, CONFIG, seed=0)
    trained_adapters(model)
    return fam, config, model, base, names


def test_only_the_adapters_train(adapted):
    _, _, model, _, names = adapted
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert len(names) == 2 * len(EVERY_LINEAR)
    assert trained == {f"{m}.{a}.weight" for m in names for a in lora.ADAPTER_MATRICES}


def test_adapters_start_at_the_base():
    _, _, model = tiny_llama()
    ids = torch.randint(0, 4096, (2, 16))
    with torch.no_grad():
        before = model(ids)
        lora.add_adapters(model, CONFIG, seed=0)
        assert torch.equal(model(ids), before)


def test_adapters_equal_peft_and_their_merge(adapted):
    import peft
    import transformers

    fam, config, model, base, _ = adapted
    theirs = transformers.LlamaForCausalLM(fam.hf_config(config)).eval()
    theirs.load_state_dict(base, strict=False)
    theirs = peft.get_peft_model(theirs, peft.LoraConfig(
        r=CONFIG.rank, lora_alpha=CONFIG.alpha, target_modules=EVERY_LINEAR)).eval()
    adapters = lora.adapter_weights(model.state_dict())
    theirs_state = {f"base_model.model.{n.removesuffix('.weight')}.default.weight": w
                    for n, w in adapters.items()}
    missing = set(theirs_state) - set(theirs.state_dict())
    assert not missing, sorted(missing)[:3]
    theirs.load_state_dict(theirs_state, strict=False)

    merged_model = tiny_llama(init=False)[2]
    merged_model.load_state_dict(lora.merged(model.state_dict(), CONFIG.scale))
    ids = torch.randint(0, 4096, (2, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours, peft_logits, merged = model(ids), theirs(ids).logits, merged_model(ids)
        plain = tiny_llama()[2](ids)
    assert (ours - plain).abs().max() > 1e-2  # the adapters do something
    assert torch.allclose(ours, peft_logits, atol=1e-5, rtol=0)
    assert torch.allclose(merged, ours, atol=1e-5, rtol=0)


def test_adapters_shard_as_their_base_weights():
    fam, _, model = tiny_llama(init=False)
    with torch.device("meta"):
        lora.add_adapters(model.to("meta"), CONFIG, seed=0)
    rules = ShardingRules.from_yaml(fam.preset("sharding", "fsdp_tensor"))
    plan = {p.name: p for p in plan_params(model, rules, {"fsdp": 2, "tensor": 2})}
    q, o = "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj"
    assert plan[f"{q}.weight"].spec == ("tensor", "fsdp")
    assert plan[f"{q}.lora_A.weight"].spec == (None, "fsdp")
    assert plan[f"{q}.lora_B.weight"].spec == ("tensor", None)
    assert plan[f"{o}.lora_A.weight"].spec == (None, "tensor")
    assert plan[f"{o}.lora_B.weight"].spec == ("fsdp", None)
    assert plan[f"{q}.lora_A.weight"].rule == plan[f"{q}.weight"].rule


def test_a_weight_no_rule_covers_is_still_refused():
    fam, _, model = tiny_llama(init=False)
    lora.add_adapters(model.to("meta"), CONFIG, seed=0)
    rules = ShardingRules.from_dict({"params": {"model.embed_tokens.weight": [None, None]}})
    with pytest.raises(ShardingError, match="no sharding rule covers param"):
        plan_params(model, rules, {"fsdp": 1})


@pytest.mark.parametrize("config, message", [
    (lora.LoraConfig(rank=4, targets=["qkv_proj"]),
     "'qkv_proj' matches no module of the model; its linear layers are .*q_proj"),
    (lora.LoraConfig(rank=4, targets=["input_layernorm"]),
     "model.layers.0.input_layernorm is a LlamaRMSNorm, not a linear layer"),
    (lora.LoraConfig(rank=4096, targets=["q_proj"]),
     r"lora.rank=4096 is larger than model.layers.0.self_attn.q_proj's smaller dimension"),
])
def test_bad_targets_are_refused_before_anything_changes(config, message):
    _, _, model = tiny_llama(init=False)
    model.to("meta")
    with pytest.raises(UserError, match=message):
        lora.add_adapters(model, config, seed=0)
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("values, message", [
    ({"rank": -1}, "lora.rank must be 0"), ({"rank": 4, "alpha": 0.0}, "lora.alpha"),
    ({"rank": 4, "dropout": 1.0}, "lora.dropout"), ({"rank": 4, "targets": []}, "lora.targets"),
])
def test_bad_settings_are_refused(values, message):
    with pytest.raises(ValueError, match=message):
        lora.LoraConfig(**values)


def test_a_fingerprint_knows_its_base_again():
    _, _, model = tiny_llama()
    lora.add_adapters(model, CONFIG, seed=0)
    saved = lora.fingerprint(model)
    assert "model.layers.1.mlp.down_proj.weight" in saved and not any("lora" in n for n in saved)
    assert lora.same_fingerprint(saved, lora.fingerprint(model))
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(1.01)
    assert not lora.same_fingerprint(saved, lora.fingerprint(model))


def test_the_step_flops_a_lora_run_counts_are_what_its_backward_computes():
    """MFU's count (3x the forward less the frozen layers' weight gradients) against the
    FLOPs torch counts in a real forward and backward on the CPU."""
    from torch.utils.flop_counter import FlopCounterMode

    from zoo.app.run import resolve_run

    fam, config, _ = tiny_llama(init=False)
    task = fam.task
    batch = task.example_batch(resolve_run("llama-tiny", ["global_batch_size=1"]).config)

    def counted(adapted: bool) -> int:
        model = fam.build(config, init=False)
        if adapted:
            lora.add_adapters(model, CONFIG, seed=0)
        counter = FlopCounterMode(display=False)
        with counter:
            task.loss(model, batch)[0].backward()
        return counter.get_total_flops()

    ratio = lora.step_flops_ratio(lambda: fam.build(config, init=False), CONFIG, task.loss,
                                  batch)
    assert ratio == pytest.approx(counted(True) / counted(False), rel=0.05)
    assert ratio < 0.8


def test_the_plan_counts_what_lora_keeps():
    """llama-8b on a v4-8: the full tune's AdamW state alone does not fit; with adapters only
    they get gradients and optimizer state, and it fits."""
    from benchmarks.plan.analytic import make_plan
    from zoo.app.run import resolve_run

    full = make_plan(resolve_run("llama-8b", ["tpu=v4-8"]), 0.5)
    tuned = make_plan(resolve_run("llama-8b", ["tpu=v4-8", "lora.rank=16"]), 0.5)
    assert not full.fits and tuned.fits
    assert tuned.terms["gradients (fp32)"] < 0.01 * full.terms["gradients (fp32)"]
    assert tuned.flops_per_step < 0.75 * full.flops_per_step
    assert "frozen base" in tuned.flops_basis
