"""`zoo plan --compile` compiles a sampling task's decode step (benchmarks/plan/decode_step.py)
with the real TPU compiler (libtpu, compile-only) on this CPU machine: GRPO's rollout step
of llama-tiny for v5p-8 (4 chips; 8 completions of 256 slots, 2 rows a chip) compiles, its
KV cache read off the compiled program's parameters is the bytes the plan counts
(core/sampler/footprint.py) exactly, its weights are the whole model in bf16 (gathered over
fsdp once a rollout: no step gathers them), and its matmul FLOPs are one token's forward for
every row; the rollout's longest prefill compiles beside it. The train step is not compiled
(its compile: tests/multidevice/test_tpu_compile.py); the full plan of llama-8b on v5p-64:
tests/unit/test_plan_grpo.py (slow)."""

import json

import pytest

from tests.support.runs import env, start_python

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 4, 256, 8, 4, 32  # llama-tiny
INTERMEDIATE, VOCAB = 768, 4096
ROWS, SLOTS, CHIPS, BF16 = 8, 256, 4, 2
PARAMETERS = (2 * VOCAB * HIDDEN + HIDDEN + LAYERS * (
    HIDDEN * HEADS * HEAD_DIM * 2 + HIDDEN * KV_HEADS * HEAD_DIM * 2 + 3 * HIDDEN * INTERMEDIATE
    + 2 * HIDDEN))  # embedding, head, final norm; per layer projections, MLP, two norms


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("decode") / "decode.json"
    proc = start_python([str(out), "v5p-8", "llama-tiny", "task=grpo"], env(), 600,
                        "tests.support.decode_worker")
    log = "".join(proc.communicate(timeout=600))
    assert proc.returncode == 0, log[-3000:]
    return json.loads(out.read_text())


def test_the_compiled_cache_is_the_one_the_plan_counts(record):
    hbm = record["hbm_per_chip"]
    rows_per_chip = ROWS // CHIPS  # fsdp=4 splits the rows
    cache = LAYERS * 2 * KV_HEADS * HEAD_DIM * SLOTS * rows_per_chip * BF16
    assert record["rows"] == ROWS and record["slots"] == SLOTS
    assert hbm["kv_cache"] == hbm["kv_cache_analytic"] == cache  # tolerance: none
    # the bf16 copies gathered over fsdp: the whole model on every chip, read whole by
    # every step, so no step gathers weights
    assert hbm["weights"] == record["planned_weight_bytes"] == PARAMETERS * BF16
    gathered = record["collectives"].get("all-gather", {"bytes": 0})["bytes"]
    assert gathered < 0.01 * hbm["weights"], record["collectives"]
    assert 0 < hbm["other_arguments"] < 64 * 2**10  # the decode state and sampling inputs
    assert hbm["total"] == (hbm["arguments"] + hbm["outputs"] - hbm["aliased"]
                            + hbm["temporaries"] + hbm["generated_code"])


def test_the_decode_step_computes_one_token_for_every_row(record):
    """Every weight matmul once per row, and attention's scores and values over every
    cache slot (the static cache: masked, not skipped)."""
    per_layer = (HIDDEN * HEADS * HEAD_DIM * 2 + HIDDEN * KV_HEADS * HEAD_DIM * 2
                 + 3 * HIDDEN * INTERMEDIATE)
    weights = 2 * (LAYERS * per_layer + HIDDEN * VOCAB)
    attention = LAYERS * 2 * 2 * HEADS * HEAD_DIM * SLOTS
    expected = ROWS * (weights + attention) / CHIPS
    assert record["flops_per_chip"]["analytic"] == pytest.approx(expected, rel=1e-9)
    assert record["flops_per_chip"]["compiled_matmul"] == pytest.approx(expected, rel=0.01)
    assert record["compiler_estimate"]["step_seconds"] > 0


def test_the_longest_prefill_compiles_beside_it_with_the_same_cache(record):
    """The rollout's other program: its prompts at their largest bucket (seq_len 256 less 64
    new tokens), the cache and weights it writes and reads as large as the decode step's."""
    prefill = record["prefill"]
    assert prefill["prompt_bucket"] == SLOTS - 64
    hbm, decode = prefill["hbm_per_chip"], record["hbm_per_chip"]
    assert hbm["arguments"] >= decode["weights"] + decode["kv_cache"]
    assert abs(hbm["arguments"] - decode["arguments"]) < 2**20  # prompts for decode state
    assert hbm["total"] > hbm["arguments"]
