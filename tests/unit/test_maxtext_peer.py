"""The MaxText peer's translation of a suite entry and its reading of MaxText's log (the run
itself: tests/e2e/test_bench.py, slow)."""

import pytest

from benchmarks import maxtext
from benchmarks.suite import Entry, load_suite
from core.errors import UserError

LOG = """\
W1124 dispatch.py:236] Finished XLA compilation of jit(<lambda>) in 1.391520262 sec
W1124 dispatch.py:236] Finished XLA compilation of jit(train_step) in 2.545788050 sec
I1124 metric_logger.py:265] completed step: 0, seconds: 0.040, TFLOP/s/device: 0.165
I1124 metric_logger.py:265] completed step: 1, seconds: 0.086, TFLOP/s/device: 0.078
I1124 metric_logger.py:265] completed step: 2, seconds: 0.357, TFLOP/s/device: 0.019
W1124 dispatch.py:236] Finished XLA compilation of jit(train_step) in 0.500000000 sec
I1124 metric_logger.py:265] completed step: 3, seconds: 0.109, TFLOP/s/device: 0.061
"""


def test_log_gives_timed_steps_and_train_step_compiles_only():
    parsed = maxtext.parse_log(LOG, steps=2)
    assert parsed["step_times_s"] == [0.357, 0.109]
    assert parsed["warmup_s"] == pytest.approx(0.126)
    assert parsed["compile_s"] == pytest.approx(3.045788050)  # jit(<lambda>) is init, not step
    assert (parsed["compiles_warmup"], parsed["compiles_timed"]) == (1, 1)


def test_log_with_too_few_steps_says_so():
    with pytest.raises(UserError, match="MaxText logged 4 steps, expected 12"):
        maxtext.parse_log(LOG, steps=10)


def test_entry_becomes_maxtext_keys_for_the_same_shapes_and_devices():
    entry = Entry(name="e", model="llama-tiny", tpu="cpu-4", remat="scan",
                  global_batch_size=8, seq_len=256, overrides=["model.num_hidden_layers=32"],
                  maxtext=["remat_policy=minimal"])
    args = maxtext.maxtext_args(entry, entry.run(), steps=10)
    for key in ("base_emb_dim=256", "base_mlp_dim=768", "base_num_decoder_layers=32",
                "base_num_query_heads=8", "base_num_kv_heads=4", "head_dim=32",
                "vocab_size=4096", "max_target_length=256", "per_device_batch_size=2",
                "ici_fsdp_parallelism=4", "scan_layers=true", "dtype=float32", "steps=12",
                "hardware=cpu", "attention=dot_product"):
        assert key in args
    assert args[-1] == "remat_policy=minimal"  # the entry's own keys win (they come last)


def test_entries_maxtext_cannot_run_are_named_with_the_reason():
    assert maxtext.unsupported(Entry(name="t", model="t5-tiny")) == (
        "MaxText has no counterpart of the t5 family here (families that map: llama, "
        "mixtral, qwen3, qwen3moe, gemma3, deepseek3)")
    assert "sharding=fsdp_context has no MaxText counterpart" in maxtext.unsupported(
        Entry(name="l", model="llama-tiny", tpu="cpu-2", sharding="fsdp_context",
              overrides=["mesh.sequence=2"]))
    assert all(maxtext.unsupported(e) is None for e in load_suite("maxtext"))
