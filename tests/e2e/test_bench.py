"""`zoo bench` and `zoo plan` end to end on XLA:CPU."""

import json
import os
import subprocess
import sys

import pytest

from zoo.benchmarks.harness import compare_ratios, regressions
from zoo.benchmarks.suite import load_suite
from zoo.core.errors import UserError

SUITE = """
- name: micro
  model: llama-tiny
  tpu: cpu-2
  global_batch_size: 4
  seq_len: 64
  overrides: [model.num_hidden_layers=1, model.vocab_size=512]
"""


def zoo(*args, timeout=900):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-c", "from zoo.tools.cli import main; main()", *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """One suite entry, zoo and HF, gated against a baseline it cannot reach."""
    tmp = tmp_path_factory.mktemp("bench")
    suite = tmp / "suite.yaml"
    suite.write_text(SUITE)
    baseline = tmp / "baseline.json"
    baseline.write_text(json.dumps({"records": [{"name": "micro", "impl": "zoo", "mfu": 50.0}]}))
    result = zoo("bench", "--mfu", "--suite", str(suite), "--steps", "3", "--compare", "hf",
                 "--out", str(tmp / "out"), "--baseline", str(baseline),
                 "--profile", str(tmp / "profile"))
    return tmp / "out", result


def test_bench_writes_every_output(bench_run):
    out, result = bench_run
    assert {p.name for p in out.iterdir()} == {"results.json", "results.md", "results.png"}
    results = json.loads((out / "results.json").read_text())
    assert results["environment"]["calibration_flops"]["float32"] > 0
    assert [(r["name"], r["impl"]) for r in results["records"]] == [("micro", "zoo"),
                                                                    ("micro", "hf")]
    for record in results["records"]:
        assert record["compiles_timed"] == 0
        assert record["timed_steps"] == 3 and record["devices"] == 2
        assert 0 < record["mfu"] < 5 and record["items_per_s"] > 0
        assert record["step_time_min_s"] <= record["step_time_median_s"] <= record[
            "step_time_max_s"]
    assert "micro: step time zoo / hf = " in result.stdout
    assert "| micro | zoo |" in (out / "results.md").read_text()


def test_profile_is_captured_for_tensorboard(bench_run):
    out, _ = bench_run
    assert list((out.parent / "profile" / "micro-zoo").rglob("*.xplane.pb"))


def test_bench_gate_fails_on_regression_and_names_the_entry(bench_run):
    _, result = bench_run
    assert result.returncode == 1
    assert "slower than the baseline" in result.stderr and "micro (zoo)" in result.stderr


def test_regression_rule_uses_the_tolerance():
    records = [{"name": "a", "impl": "zoo", "mfu": 0.30}, {"name": "b", "impl": "zoo",
                                                           "mfu": 0.10}]
    baseline = {"records": [{"name": "a", "impl": "zoo", "mfu": 0.35},
                            {"name": "b", "impl": "zoo", "mfu": 0.20}]}
    assert regressions(records, baseline, tolerance=0.25) == [
        "b (zoo): MFU 10.00% vs baseline 20.00%"]


def test_ratio_is_zoo_over_peer():
    records = [{"name": "a", "impl": "zoo", "step_time_median_s": 1.0},
               {"name": "a", "impl": "hf", "step_time_median_s": 2.0}]
    assert compare_ratios(records) == [("a", "hf", 0.5)]


def test_unknown_suite_lists_the_suites():
    with pytest.raises(UserError, match="no benchmark suite 'nope'; suites: default"):
        load_suite("nope")


def test_default_suite_covers_every_family_with_valid_configs():
    from zoo.compose import load_run_config
    from zoo.registry import FAMILIES

    entries = load_suite("default")
    assert {e.model.split("-")[0] for e in entries} == set(FAMILIES)
    for entry in entries:
        family, _ = load_run_config(entry.model, entry.train_overrides())
        family.preset("sharding", entry.sharding)
        family.preset("remat", entry.remat)


def test_plan_70b_on_v4_8_does_not_fit():
    result = zoo("plan", "llama-70b", "--tpu", "v4-8")
    assert result.returncode == 0, result.stderr
    assert "does NOT fit" in result.stdout
    assert "largest term: optimizer state (adamw)" in result.stdout


def test_plan_8b_on_v5p_128_fits():
    result = zoo("plan", "llama-8b", "--tpu", "v5p-128", "global_batch_size=128",
                 "seq_len=4096")
    assert result.returncode == 0, result.stderr
    assert "\nfits: " in result.stdout and "at 50% MFU a step takes" in result.stdout


def test_plan_counts_parameters_from_the_sharding_plan():
    from zoo.plan import make_plan

    plan = make_plan("llama-8b", "v5p-128", [], 0.5)
    # 8.03e9 fp32 parameters split over 64 fsdp shards
    assert plan.terms["parameters (fp32)"] == pytest.approx(8.03e9 * 4 / 64, rel=0.01)
    assert plan.terms["optimizer state (adamw)"] == 2 * plan.terms["parameters (fp32)"]
