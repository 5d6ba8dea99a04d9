"""`zoo plan --compile --compare maxtext` end to end for a small shape: zoo's traced step and
MaxText's own train step compiled by MaxText's libtpu for v5p-8 and counted by one piece of
code (builds MaxText's environment on first use: minutes, the registry)."""

import json

import pytest

from benchmarks.plan.compare_table import describe
from tests.support.runs import zoo


@pytest.mark.slow
def test_llama_tiny_on_v5p_8_side_by_side():
    result = zoo("plan", "llama-tiny", "--tpu", "v5p-8", "--compile", "--compare", "maxtext",
                 "--json", "remat=checkpoint", timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout)
    compiler = record["versions"]["compiler"]
    assert compiler["libtpu"] == "0.0.52" and compiler["maxtext"] == "0.2.5"
    # MaxText's libtpu did compile both, not zoo's (whose path torch_xla exports)
    assert compiler["libtpu"] != record["versions"]["zoo_trace"]["libtpu"]
    assert "remat_policy=full" in record["maxtext_keys"]
    model_flops = record["model_flops_per_chip"]
    for side in ("zoo", "maxtext"):
        step = record[side]
        assert step["fits"], side
        assert step["collectives"]["all-gather"]["count"] > 0  # FSDP gathers weights
        # every layer recomputed once: about 4/3 of the model FLOPs, attention dense
        assert model_flops < step["matmul_flops"] < 2 * model_flops, side
        projected = step["projected_step"]
        assert projected["exposed_s"] >= projected["overlapped_s"] > 0
        assert 0 < projected["mfu"]["exposed"] <= projected["mfu"]["overlapped"] <= 1
    text = describe(record)
    assert "both compiled by libtpu 0.0.52" in text and "a model, not a measurement" in text
