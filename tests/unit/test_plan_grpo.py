"""`zoo plan ... task=grpo` counts the rollout's KV cache (zoo/tasks/grpo.py `placed`,
core/sampler/footprint.py): every layer's cache for global_batch_size rows (rounded up to
the batch split) of seq_len slots, laid out as the family's `cache_layout` says, in the
run's precision, split per chip as the sampler places it. Checked here by hand for three
layouts (grouped-query keys and values, gemma3's window rings, deepseek3's MLA latent)
without libtpu; `zoo train`'s fit check refuses a rollout whose cache does not fit; the
compiled plan of llama-8b on v5p-64, its update step and its rollout's decode step, is
`slow`."""

import json
import re
import subprocess
import sys

import pytest

from benchmarks.plan.analytic import check_fits, describe, make_plan
from benchmarks.plan.tpu_step import describe_compiled
from core.backends.xla.spmd import divisible_spec
from core.errors import UserError
from core.sampler.footprint import split
from tests.support.paths import ROOT
from tests.unit.test_plan_placed import compiled
from zoo.app.run import resolve_run

CACHE = "sampler KV cache (bf16)"
WEIGHTS = "sampler weights (bf16, gathered over fsdp)"
REFERENCE = "reference model (frozen copy)"
# 6 completions (3 prompts x 2) over fsdp=4: 8 rows, 2 a chip; mesh.tensor=2 splits heads
ROLLOUT = ["tpu=v5p-16", "task=grpo", "mesh.tensor=2", "global_batch_size=6",
           "grpo.num_generations=2"]
ROWS_PER_CHIP, SLOTS, BF16 = 2, 256, 2  # slots: seq_len (prompt room + max_new_tokens)


def plan(model: str, *overrides: str):
    return make_plan(resolve_run(model, [*ROLLOUT, *overrides]), 0.5)


def test_llama_caches_keys_and_values_of_every_layer_split_over_rows_and_heads():
    """llama-tiny: 4 layers, 4 kv heads of 32 (2 a chip over tensor=2)."""
    result = plan("llama-tiny")
    layers, kv_heads, head_dim = 4, 4, 32
    assert result.terms[CACHE] == layers * 2 * kv_heads * head_dim * SLOTS * 8 * BF16 / (4 * 2)
    assert result.terms[CACHE] == layers * 2 * (kv_heads // 2) * head_dim * SLOTS \
        * ROWS_PER_CHIP * BF16
    entry, weights = result.placed
    assert entry.name == CACHE and not entry.in_step  # lives between the step's programs
    assert weights.name == WEIGHTS and not weights.in_step
    assert result.record()["beside_model"][0] == {
        "name": CACHE, "bytes": result.terms[CACHE], "in_step": False,
        "advice": entry.advice, "in_decode": "cache"}
    assert f"{CACHE}  " in describe(result)


def test_gemma3_sliding_layers_keep_a_ring_of_their_window():
    """gemma3-tiny: 2 global layers of 256 slots, 2 sliding ones of their 8-token window;
    2 kv heads of 64 (1 a chip)."""
    window, kv_heads, head_dim = 8, 2, 64
    per_slot = 2 * (kv_heads // 2) * head_dim * ROWS_PER_CHIP * BF16
    assert plan("gemma3-tiny").terms[CACHE] == (2 * SLOTS + 2 * window) * per_slot


def test_deepseek3_caches_the_mla_latent_split_over_rows_only():
    """deepseek3-tiny: 3 layers of the compressed latent (kv_lora_rank 32) and the shared
    rope key (16), whole on every tensor device."""
    assert plan("deepseek3-tiny").terms[CACHE] == 3 * (32 + 16) * SLOTS * ROWS_PER_CHIP * BF16


def test_a_run_in_fp32_caches_fp32_and_a_full_tune_with_beta_adds_its_reference():
    """Two CPU devices (fsdp=2): 8 completions, 4 rows a device, 4-byte values."""
    run = resolve_run("llama-tiny", ["tpu=cpu-2", "task=grpo", "grpo.beta=0.04"])
    result = make_plan(run, 0.5)
    assert result.terms["sampler KV cache (fp32)"] == 4 * 2 * 4 * 32 * SLOTS * 4 * 4
    assert result.terms[REFERENCE] == result.terms["parameters (fp32)"]
    # the sampler reads them gathered over fsdp: the whole model on each of the 2 devices
    gathered = "sampler weights (fp32, gathered over fsdp)"
    whole = sum(p.numel() for p in run.meta_model(run.built_config.model).parameters())
    assert result.terms[gathered] == whole * 4
    lora = make_plan(resolve_run("llama-tiny", ["tpu=cpu-2", "task=grpo", "grpo.beta=0.04",
                                                "lora.rank=8"]), 0.5)
    assert [entry.name for entry in lora.placed] == ["sampler KV cache (fp32)", gathered]


@pytest.mark.parametrize("mesh", [{"fsdp": 4, "tensor": 2}, {"fsdp": 2, "tensor": 8},
                                  {"data": 2, "fsdp": 3, "expert": 1, "tensor": 1}])
def test_the_split_is_the_one_the_xla_backend_places_the_cache_with(mesh):
    """Per stream, the plan's parts equal the devices of the axes the xla backend's
    `divisible_spec` keeps (a dim the axes do not divide stays whole)."""
    full = {"data": 1, "fsdp": 1, "sequence": 1, "expert": 1, "tensor": 1, **mesh}
    for spec, dims in [(("batch", None, "tensor", None), (8, 256, 4, 32)),
                       (("batch", None, None), (8, 256, 48)), (("batch",), (6,))]:
        kept = divisible_spec(spec, dims, full)
        parts = 1
        for axes in kept:
            for axis in (axes,) if isinstance(axes, str) else axes or ():
                parts *= full[axis]
        assert split(spec, dims, full) == parts, (spec, dims, kept)


# llama-8b on v5p-64 (fsdp=32): a rollout of 8192 completions of 4096 tokens, the update
# accumulated over 512 micro-batches: 24.5 GiB per chip without the rollout, 167.4 with its
# cache (128 GiB) and the weights its sampler reads whole (bf16: 14.96 GiB)
BIG_ROLLOUT = ["tpu=v5p-64", "task=grpo", "global_batch_size=8192", "seq_len=4096",
               "grad_accum=512"]


def test_zoo_train_refuses_a_rollout_whose_cache_does_not_fit_and_says_what_to_change():
    """32 layers x 2 x 8 kv heads x 128 x 4096 slots x 256 rows a chip x 2 bytes = 128 GiB."""
    run = resolve_run("llama-8b", BIG_ROLLOUT)
    result = make_plan(run, 0.5)
    assert result.terms[CACHE] == 32 * 2 * 8 * 128 * 4096 * 256 * 2 == 128 * 2**30
    assert result.total - result.terms[CACHE] < result.hbm_bytes  # the cache tips it
    with pytest.raises(UserError, match=re.escape(
            f"167.4 GiB per chip by `zoo plan` ({CACHE} 128.00 GiB, {WEIGHTS} 14.96 GiB) "
            "but a v5p-64 chip has 95 GiB; the sampler's KV cache holds global_batch_size "
            "rows")) as refused:
        check_fits(run)
    assert "lower global_batch_size or seq_len" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_compiled_plan_adds_the_cache_beside_the_step():
    result = plan("llama-tiny")
    shown = compiled(result, 1000)
    assert shown.total_bytes == (shown.compiled.total_bytes + result.terms[CACHE]
                                 + result.terms[WEIGHTS])
    assert f"{CACHE} (beside the step: analytic)" in describe_compiled(shown)
    assert f"{WEIGHTS} (beside the step: analytic)" in describe_compiled(shown)


@pytest.mark.slow  # libtpu compiles llama-8b's GRPO step for 32 chips: ~8 min, 16 GiB of host RAM
def test_llama_8b_grpo_compiles_for_v5p_64_and_fits_with_its_cache(tmp_path):
    out = tmp_path / "records.json"
    jobs = [["v5p-64", [["llama-8b", ["task=grpo"]]]]]
    done = subprocess.run([sys.executable, "-m", "tests.support.compile_worker", str(out),
                           json.dumps(jobs)], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (record,) = json.loads(out.read_text())
    hbm = record["hbm_per_chip"]
    cache = 32 * 2 * 8 * 128 * 256 * 1 * 2  # layers x k,v x kv heads x head_dim x slots x rows
    assert hbm["analytic"][CACHE] == cache
    assert hbm["compiled"]["beside_step"] == cache + hbm["analytic"][WEIGHTS]
    # the decode step compiled too: the peak is the update's or the rollout's (the
    # persistent state and the decode step), the cache read off its program
    decode = record["decode_step"]
    assert decode["rows"] == 32 and decode["slots"] == 256
    assert decode["hbm_per_chip"]["kv_cache"] == decode["hbm_per_chip"]["kv_cache_analytic"] \
        == cache
    # the weights it reads are whole (gathered once a rollout): no token gathers them again
    assert decode["hbm_per_chip"]["weights"] == hbm["analytic"][WEIGHTS]
    gathered = decode["collectives"].get("all-gather", {"bytes": 0})["bytes"]
    assert gathered < 0.01 * hbm["analytic"][WEIGHTS]
    update = sum(hbm["compiled"][k] for k in ("arguments", "outputs", "temporaries",
                                              "generated_code")) - hbm["compiled"]["aliased"]
    rollout = hbm["compiled"]["arguments"] + max(decode["hbm_per_chip"]["total"],
                                                 decode["prefill"]["hbm_per_chip"]["total"])
    assert hbm["compiled"]["rollout"] == rollout
    assert hbm["compiled"]["total"] == pytest.approx(max(update, rollout))
    assert record["fits"]
