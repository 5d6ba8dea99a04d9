"""LoRA adapters (core/lora.py) against peft's own: our llama with adapters on every linear
layer (o_proj, which takes heads, included) gives the logits of transformers'
LlamaForCausalLM with peft's LoRA on the same weights (fp32, 1e-5), and its merged weights
give them too; so does mixtral with adapters on its experts, through the PEFT folder zoo
writes; adapters are sharded as their base weights; bad targets are refused."""

import dataclasses

import pytest
import torch

from core import lora
from core.errors import UserError
from core.sharding import ShardingError, ShardingRules, base_weight_of, plan_params
from core.store import frozen_base
from zoo.registry import family

EVERY_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CONFIG = lora.LoraConfig(rank=4, alpha=8.0, targets=EVERY_LINEAR)
EXPERTS = lora.LoraConfig(rank=4, alpha=8.0, targets=["q_proj", "gate_up_proj", "down_proj"])


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
    assert len(names) == 2 * len(EVERY_LINEAR) and len(trained) == 2 * len(names)
    assert {base_weight_of(n) for n in trained} == set(names)


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


def test_expert_adapters_equal_peft_from_the_folder_zoo_writes_and_their_merge(tmp_path):
    """Adapters on mixtral's stacked experts (one per expert) and on q_proj, written as a
    PEFT folder (`target_parameters`) that peft.PeftModel.from_pretrained loads over
    transformers' MixtralForCausalLM: the same logits, and the merged model's too."""
    import peft
    import transformers

    from eval.export import write_peft_adapter
    from tests.support.mixtral_cases import SMALL

    fam = family("mixtral")
    model = fam.build(SMALL, seed=0).eval()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    lora.add_adapters(model, EXPERTS, seed=0)
    trained_adapters(model)
    assert model.model.layers[0].mlp.experts.lora_B.gate_up_proj.shape == (4, 96, 4)
    theirs = transformers.MixtralForCausalLM(SMALL.to_hf()).eval()
    theirs.load_state_dict(base)
    theirs.save_pretrained(tmp_path / "base")
    write_peft_adapter(model, EXPERTS, str(tmp_path / "base"), tmp_path / "adapter")
    theirs = peft.PeftModel.from_pretrained(theirs, tmp_path / "adapter").eval()

    merged_model = fam.build(SMALL, init=False).eval()
    merged_model.load_state_dict(lora.merged(model.state_dict(), EXPERTS.scale))
    ids = torch.randint(0, SMALL.vocab_size, (2, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours, peft_logits, merged = model(ids), theirs(ids).logits, merged_model(ids)
        plain = fam.build(SMALL, seed=0).eval()(ids)
    assert (ours - plain).abs().max() > 1e-2
    assert torch.allclose(ours, peft_logits, atol=1e-5, rtol=0)
    assert torch.allclose(merged, ours, atol=1e-5, rtol=0)


def test_expert_adapters_shard_as_the_expert_weights():
    fam = family("mixtral")
    model = fam.build(fam.sizes["tiny"], init=False)
    lora.add_adapters(model.to("meta"), EXPERTS, seed=0)
    rules = ShardingRules.from_yaml(fam.preset("sharding", "fsdp_expert"))
    plan = {p.name: p for p in plan_params(model, rules, {"fsdp": 2, "expert": 2})}
    experts = "model.layers.0.mlp.experts"
    weight = plan[f"{experts}.gate_up_proj"].spec
    assert weight[0] == "expert"
    assert plan[f"{experts}.lora_A.gate_up_proj"].spec == (weight[0], None, weight[2])
    assert plan[f"{experts}.lora_B.gate_up_proj"].spec == (weight[0], weight[1], None)


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


@pytest.mark.parametrize("name, config, message", [
    ("llama", lora.LoraConfig(rank=4, targets=["qkv_proj"]),
     "'qkv_proj' matches nothing in the model; LoRA adapts the linear layers .*q_proj"),
    ("llama", lora.LoraConfig(rank=4, targets=["input_layernorm"]),
     "model.layers.0.input_layernorm is a LlamaRMSNorm, not a linear layer; LoRA adapts"),
    ("llama", lora.LoraConfig(rank=4096, targets=["q_proj"]),
     r"lora.rank=4096 is larger than model.layers.0.self_attn.q_proj.weight's smaller "),
    ("mixtral", lora.LoraConfig(rank=4, targets=["experts"]),
     "mlp.experts is a MixtralExperts, not a linear layer; .* expert weights down_proj, "
     "gate_up_proj"),
    ("mixtral", lora.LoraConfig(rank=300, targets=["gate_up_proj"]),
     r"lora.rank=300 is larger than model.layers.0.mlp.experts.gate_up_proj's smaller "
     r"dimension \(1024x256\)"),
    ("mixtral", lora.LoraConfig(rank=4, dropout=0.1, targets=["gate_up_proj"]),
     "lora.dropout must be 0 when adapting expert weights"),
])
def test_bad_targets_are_refused_before_anything_changes(name, config, message):
    fam = family(name)
    model = fam.build(fam.sizes["tiny"], init=False).to("meta")
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
    saved = frozen_base.fingerprint(model)
    assert "model.layers.1.mlp.down_proj.weight" in saved and not any("lora" in n for n in saved)
    assert frozen_base.same_fingerprint(saved, frozen_base.fingerprint(model))
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(1.01)
    assert not frozen_base.same_fingerprint(saved, frozen_base.fingerprint(model))


@pytest.mark.parametrize("name, adapters", [("llama", CONFIG), ("mixtral", EXPERTS)])
def test_the_step_flops_a_lora_run_counts_are_what_its_backward_computes(name, adapters):
    """MFU's count (3x the forward less the frozen layers' weight gradients) against the
    FLOPs torch counts in a real forward and backward on the CPU (mixtral: dropless dense
    dispatch, whose routing matmuls are too small to blur the comparison)."""
    from torch.utils.flop_counter import FlopCounterMode

    from zoo.app.run import resolve_run

    fam = family(name)
    config = dataclasses.replace(fam.sizes["tiny"], num_hidden_layers=2, attention="plain",
                                 **({"dispatch": "dense"} if name == "mixtral" else {}))
    task = fam.task
    batch = task.example_batch(resolve_run(f"{name}-tiny", ["global_batch_size=1"]).config)

    def counted(adapted: bool) -> int:
        model = fam.build(config, init=False)
        if adapted:
            lora.add_adapters(model, adapters, seed=0)
        counter = FlopCounterMode(display=False)
        with counter:
            task.loss(model, batch)[0].backward()
        return counter.get_total_flops()

    ratio = lora.step_flops_ratio(lambda: fam.build(config, init=False), adapters, task.loss,
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
