"""Plans count everything a task places beside the trained model (core.task.Task.placed):
DPO's frozen reference copy in a full tune (none under LoRA, whose reference is the model
with its adapters off), in the analytic plan, in `zoo train`'s fit check and in the compiled
plan's totals (the compile itself: tests/multidevice/test_tpu_compile.py)."""

import re

import pytest

from benchmarks.plan.analytic import check_fits, make_plan
from benchmarks.plan.tpu_compile import CompiledStep, compile_target
from benchmarks.plan.tpu_step import CompiledPlan, describe_compiled, persistent_bytes
from core import runtime
from core.errors import UserError
from core.task import Placed
from zoo.app.run import resolve_run

REFERENCE = "reference model (frozen copy)"


def plan_of(*overrides: str):
    return make_plan(resolve_run("llama-tiny", list(overrides)), 0.5)


def test_a_full_tune_dpo_plan_counts_its_reference_as_the_models_own_shards():
    """llama-tiny on v5p-8 (fsdp=4): every weight is split four ways but the norms, which
    every chip holds whole; the copy is fp32 like the model."""
    run = resolve_run("llama-tiny", ["tpu=v5p-8", "task=dpo"])
    expected = sum(4 * p.numel() // (1 if name.endswith("norm.weight") else 4)
                   for name, p in run.meta_model().named_parameters())
    dpo, plain = make_plan(run, 0.5), plan_of("tpu=v5p-8")
    assert dpo.terms[REFERENCE] == expected == dpo.terms["parameters (fp32)"]
    assert dpo.total - plain.total == expected
    assert [entry.name for entry in dpo.placed] == [REFERENCE]
    assert REFERENCE not in plain.terms
    # its FLOPs: the reference's forward beside the policy's step, a third more
    assert dpo.flops_per_step == plain.flops_per_step * 4 / 3
    assert dpo.flops_basis == "3 x forward, causal, plus 1 reference forward(s)"


def test_lora_dpo_places_no_copy_and_trains_only_the_adapters():
    """The reference is the model with its adapters off; gradients and AdamW's two states
    are the adapters' alone, the frozen base has neither."""
    from core.sharding import plan_params

    run = resolve_run("llama-tiny", ["tpu=v5p-8", "task=dpo", "lora.rank=8"])
    model = run.meta_model()
    params = plan_params(model, run.rules, run.mesh)
    adapters = sum(p.shard_bytes for p in params if ".lora_" in p.name)
    plan = make_plan(run, 0.5, model)
    assert REFERENCE not in plan.terms and not plan.placed
    assert plan.terms["gradients (fp32)"] == adapters
    assert plan.terms["optimizer state (adamw)"] == 2 * adapters
    assert plan.terms["parameters (fp32)"] == sum(p.shard_bytes for p in params)


def test_the_fit_check_refuses_a_dpo_run_that_fits_only_without_its_reference(monkeypatch):
    """On a CPU every device's share is held by the host: a budget between the plain run's
    need and the DPO run's lets the one through and refuses the other, naming the copy."""
    plain, dpo = plan_of("tpu=cpu-2"), plan_of("tpu=cpu-2", "task=dpo")
    budget = (plain.total + dpo.total) * 2 / 2
    monkeypatch.setattr(runtime, "host_memory_available", lambda: budget)
    check_fits(resolve_run("llama-tiny", ["tpu=cpu-2"]))
    with pytest.raises(UserError, match=f"host memory by `zoo plan` .*{re.escape(REFERENCE)} "):
        check_fits(resolve_run("llama-tiny", ["tpu=cpu-2", "task=dpo"]))


def test_the_fit_check_on_a_tpu_names_the_reference():
    """llama-8b on v4-8 (32 GiB a chip): 34.1 GiB for plain training, 41.6 with the copy."""
    with pytest.raises(UserError, match=re.escape(
            f"41.6 GiB per chip by `zoo plan` ({REFERENCE} 7.48 GiB) but a v4-8 chip has 32")):
        check_fits(resolve_run("llama-8b", ["tpu=v4-8", "task=dpo"]))


def compiled(plan, arguments: int) -> CompiledPlan:
    step = CompiledStep(argument_bytes=arguments, output_bytes=100, alias_bytes=100,
                        temp_bytes=1000, code_bytes=10, flops=1e9, matmul_flops=1e9,
                        bytes_accessed=1e6, optimal_seconds=None, collectives={},
                        compile_seconds=1.0)
    return CompiledPlan(plan, step, "flash", 1e9, 1.0, compile_target(plan.topology), 0)


def test_the_compiled_plan_sets_the_reference_beside_the_programs_arguments():
    plan = plan_of("tpu=v5p-8", "task=dpo")
    assert persistent_bytes(plan) == sum(
        v for k, v in plan.terms.items() if k.startswith(("parameters", "optimizer"))
    ) + plan.terms[REFERENCE]
    result = compiled(plan, int(persistent_bytes(plan)))
    assert result.total_bytes == result.compiled.total_bytes  # in the program already
    assert f"+ {REFERENCE} (+ batch)" in describe_compiled(result)


def test_what_lives_between_programs_is_added_to_the_compiled_total():
    """A sampler's KV cache (issue 63) is never an argument of the train step: the compiled
    plan adds it to the compiler's total, and the fit is decided on the sum."""
    plain = plan_of("tpu=v5p-8")
    cache = Placed("sampler KV cache", 95 * 2**30, in_step=False)
    plan = type(plain)(**{**plain.__dict__, "placed": (cache,),
                          "terms": {**plain.terms, cache.name: cache.bytes}})
    result = compiled(plan, int(persistent_bytes(plan)))
    assert persistent_bytes(plan) == persistent_bytes(plain)
    assert result.total_bytes == result.compiled.total_bytes + cache.bytes
    assert not result.fits and compiled(plain, int(persistent_bytes(plain))).fits
    assert result.record()["hbm_per_chip"]["compiled"]["beside_step"] == cache.bytes
