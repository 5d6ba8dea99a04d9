"""The compiled plan of a task that samples (benchmarks/plan/tpu_step.py with a compiled
decode step, benchmarks/plan/decode_step.py): update and rollout never run at once, so the
per-chip peak is the persistent state (the update step's arguments) plus the larger of the
update's transients and the decode step, and fit is decided on it; a decode step the
compiler refuses does not fit, with what shrinks the cache. Figures made up here; the
compiles themselves: tests/multidevice/test_plan_decode.py, and the slow llama-8b plan in
tests/unit/test_plan_grpo.py."""

import re

from benchmarks.plan.analytic import make_plan
from benchmarks.plan.decode_step import CompiledDecode
from benchmarks.plan.tpu_compile import CompiledStep
from benchmarks.plan.tpu_step import describe_compiled
from core.out_of_memory import OutOfMemory
from tests.unit.test_plan_placed import compiled
from zoo.app.run import resolve_run
from zoo.tasks.grpo import CACHE_ADVICE

GIB = 2**30


def rollout_plan(decode_program, prefill=None):
    plan = make_plan(resolve_run("llama-tiny", ["tpu=v5p-8", "task=grpo"]), 0.5)
    result = compiled(plan, 10 * GIB)  # the update step: 10 GiB of arguments, ~1 KiB more
    result.decode = CompiledDecode(decode_program, rows=8, slots=256, new_tokens=64,
                                   weight_bytes=GIB, cache_bytes=2 * GIB, trace_seconds=0.1,
                                   prefill=prefill, prompt_bucket=192)
    return result


def decode_step(temporaries: int) -> CompiledStep:
    return CompiledStep(argument_bytes=3 * GIB + 1000, output_bytes=100, alias_bytes=100,
                        temp_bytes=temporaries, code_bytes=10, flops=1e9, matmul_flops=1e9,
                        bytes_accessed=1e9, optimal_seconds=None, collectives={},
                        compile_seconds=1.0)


def test_the_peak_is_the_persistent_state_and_the_larger_program():
    small = rollout_plan(decode_step(0))
    update = small.compiled.total_bytes
    assert small.rollout_bytes == 10 * GIB + 3 * GIB + 1000 + 10
    assert small.total_bytes == small.rollout_bytes > update  # the rollout: 3 GiB more
    assert small.fits
    text = describe_compiled(small)
    assert "peak HBM per chip: persistent state (the update step's arguments, 10.00 GiB)" \
        in text
    # each of the rollout's shares: the analytic count beside the compiled program's figure
    assert re.search(r"sampler KV cache \(bf16\) \(analytic 1\.00 MiB\) +2\.00 GiB", text)
    assert re.search(r"sampler weights \(bf16, gathered over fsdp\) \(analytic [0-9.]+ MiB\)"
                     r" +1\.00 GiB", text)
    big = rollout_plan(decode_step(90 * GIB))  # 103 GiB while it samples: over 95
    assert big.total_bytes == big.rollout_bytes and not big.fits
    assert "does NOT fit by the compiler's numbers" in describe_compiled(big)
    assert CACHE_ADVICE in describe_compiled(big)
    record = big.record()
    assert record["hbm_per_chip"]["compiled"]["total"] == big.total_bytes
    assert record["decode_step"]["hbm_per_chip"]["kv_cache"] == 2 * GIB


def test_a_decode_step_the_compiler_refuses_does_not_fit_and_says_what_shrinks_it():
    refused = rollout_plan(OutOfMemory(120 * GIB, 95 * GIB, ["100 GiB bf16[...] kv"], 2.0))
    assert not refused.fits
    text = describe_compiled(refused)
    assert "does NOT fit by the compiler's numbers: the compiler refused a program of the " \
           "rollout" in text
    assert "the decode step does NOT fit, by the compiler's numbers: it needs at least " \
           "120.00 GiB of the 95.00 GiB" in text
    assert CACHE_ADVICE in text
    assert refused.record()["decode_step"]["hbm_per_chip"]["refused"]


def test_a_prefill_larger_than_the_decode_step_sets_the_rollouts_peak():
    """The longest prefill (192 prompt tokens a row) holds the same cache and weights and a
    forward's temporaries: 5 GiB here, against the decode step's 3 GiB."""
    plan = rollout_plan(decode_step(0), prefill=decode_step(2 * GIB))
    assert plan.rollout_bytes == 10 * GIB + plan.decode.prefill.total_bytes
    assert plan.total_bytes == plan.rollout_bytes and plan.fits
    text = describe_compiled(plan)
    assert "the longest prefill (8 rows x 192 prompt tokens), compiled in 1.0 s: 5.00 GiB" \
        in text
    assert "the rollout's programs (the decode step 3.00 GiB, the longest prefill 5.00 GiB)" \
        in text
    assert plan.record()["decode_step"]["prefill"]["hbm_per_chip"]["total"] == \
        plan.decode.prefill.total_bytes
    refused = rollout_plan(decode_step(0), prefill=OutOfMemory(120 * GIB, 95 * GIB,
                                                                ["90 GiB f32[...]"], 2.0))
    assert not refused.fits
    assert "the longest prefill (8 rows x 192 prompt tokens) does NOT fit, by the " \
           "compiler's numbers: it needs at least 120.00 GiB" in describe_compiled(refused)
