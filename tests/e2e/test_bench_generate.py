"""`zoo bench` on a generation entry end to end on XLA:CPU: the device sampler's prefill and
decode tokens/s beside transformers' generate on the same weights, prompts and new tokens."""

import json

import pytest

from tests.support.runs import zoo

SUITE = """
- name: micro-generate
  model: llama-tiny
  tpu: cpu-1
  global_batch_size: 2
  seq_len: 16
  max_new_tokens: 8
  overrides: [model.num_hidden_layers=1, model.vocab_size=512]
"""


def bench(tmp_path, suite, *args, timeout=600):
    """`zoo bench --compare hf` on `suite` (a name or a file), two timed calls an entry."""
    result = zoo("bench", "--suite", suite, "--steps", "2", "--compare", "hf",
                 "--out", str(tmp_path / "out"), *args, timeout=timeout)
    assert result.returncode == 0, result.stderr[-2000:]
    return result, json.loads((tmp_path / "out" / "results.json").read_text())


@pytest.mark.slow  # a minute on 2 busy cores; tests/unit/test_bench_generation.py is the default
def test_generation_is_timed_beside_transformers_generate_making_the_same_tokens(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    result, results = bench(tmp_path, str(suite))
    zoo_record, hf_record = results["records"]
    assert [(r["name"], r["impl"]) for r in (zoo_record, hf_record)] == [
        ("micro-generate", "zoo"), ("micro-generate", "hf")]
    for record in (zoo_record, hf_record):
        assert record["kind"] == "generate" and record["timed_calls"] == 2
        assert record["prefill_tokens_per_s"] > 0 and record["decode_tokens_per_s"] > 0
        assert record["compiles_timed"] == 0
    # the untimed call compiled the prompts' bucket and the decode step, nothing after
    assert zoo_record["compiles_warmup"] == 2 and zoo_record["compile_s"] > 0
    # the ratio compares the same work: both made the same greedy ids (8 for each prompt)
    assert zoo_record["tokens_sha256"] == hf_record["tokens_sha256"]
    [ratio] = results["generation_ratios"]
    assert ratio["same_tokens"] and ratio["prefill"] > 0 and ratio["decode"] > 0
    assert "micro-generate: tokens/s zoo / hf: prefill " in result.stdout
    assert "(the same greedy tokens)" in result.stdout
    assert "| micro-generate | hf |" in (tmp_path / "out" / "results.md").read_text()


@pytest.mark.slow  # the shipped suite's entry on 4 devices: bigger compiles and calls
def test_the_generate_suite_on_4_devices_makes_transformers_tokens(tmp_path):
    _, results = bench(tmp_path, "generate", "--tpu", "cpu-4", timeout=1200)
    zoo_record, hf_record = results["records"]
    assert zoo_record["devices"] == 4 and zoo_record["compiles_timed"] == 0
    assert zoo_record["tokens_sha256"] == hf_record["tokens_sha256"]
