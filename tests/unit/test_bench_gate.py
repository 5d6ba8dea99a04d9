"""The bench gate's rules and the CPU peak bookkeeping, on hand-made records."""

import json

import pytest

from benchmarks.calibration import RunPeaks
from benchmarks.gate import judge, load_baseline
from core.errors import UserError
from core.flops import PeakMeasurement, spread


def record(name, mfu, ratio, impl="zoo"):
    return {"name": name, "impl": impl, "mfu": mfu, "step_time_vs_reference": ratio}


def results(*records, reference="a"):
    return {"reference_entry": reference, "records": list(records)}


BASELINE = results(record("a", 0.30, 1.0), record("b", 0.20, 2.0), record("b", 0.10, 3.0, "hf"))


def test_within_the_tolerance_passes():
    now = results(record("a", 0.28, 1.0), record("b", 0.19, 2.1), record("b", 0.10, 3.2, "hf"))
    assert judge(now, BASELINE, tolerance=0.10) == {}


def test_mfu_drop_beyond_the_tolerance_fails_naming_entry_and_numbers():
    now = results(record("a", 0.30, 1.0), record("b", 0.15, 2.0))
    assert judge(now, BASELINE, tolerance=0.10) == {
        ("b", "zoo"): "b (zoo): MFU 15.00% vs baseline 20.00%"}


def test_step_time_growth_relative_to_the_reference_fails():
    # The whole machine ran slower (MFU of the reference fell too, within tolerance), but b
    # slowed far more than the reference: that is b's regression.
    now = results(record("a", 0.28, 1.0), record("b", 0.19, 2.5))
    assert judge(now, BASELINE, tolerance=0.10) == {
        ("b", "zoo"): "b (zoo): step time 2.50x a's vs baseline 2.00x"}


def test_ratios_to_another_reference_and_unknown_entries_are_not_judged():
    now = results(record("b", 0.20, 9.0), record("c", 0.01, 9.0), reference="c")
    assert judge(now, BASELINE, tolerance=0.10) == {}


def test_records_without_mfu_are_judged_on_ratio_only():
    now = results(record("a", None, 1.0), record("b", None, 2.0))
    assert judge(now, BASELINE, tolerance=0.10) == {}


def test_peak_is_the_median_of_the_entries_best_windows_and_the_spread_is_reported():
    peaks = RunPeaks()
    peaks.measurements += [PeakMeasurement("float32", (300e9, 380e9, 390e9)),
                           PeakMeasurement("float32", (370e9, 400e9)),
                           PeakMeasurement("float32", (250e9, 300e9)),
                           PeakMeasurement("bfloat16", (200e9,))]
    assert peaks.peak("float32") == 390e9  # one disturbed entry (300) does not move it
    summary = peaks.summary()
    assert summary["float32"]["peak_flops"] == 390e9
    assert summary["float32"]["measurements"] == 3
    assert summary["float32"]["spread"] == pytest.approx(100e9 / 390e9)
    assert summary["bfloat16"]["spread"] == 0
    assert "peak = the median" in summary["method"]
    assert RunPeaks().summary() is None


def test_spread_is_range_over_median():
    assert spread([90, 100, 110]) == pytest.approx(0.2)
    assert PeakMeasurement("float32", (90.0, 100.0, 110.0)).flops == 110.0


@pytest.mark.parametrize("text", ["{", "[]", '{"records": 3}', "\x80"])
def test_a_baseline_that_is_not_a_results_file_fails_in_one_line(tmp_path, text):
    path = tmp_path / "baseline.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(UserError, match="is not a zoo bench results.json"):
        load_baseline(str(path))


def test_a_results_file_is_a_baseline(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(BASELINE))
    assert load_baseline(str(path)) == BASELINE


def test_a_run_on_a_busy_host_says_so():
    from benchmarks.report import busy_host_warning

    def run(spread):
        return {"calibration": {"method": "m", "float32": {"spread": spread}}, "records": []}

    assert busy_host_warning(run(0.03)) is None
    assert busy_host_warning({"calibration": None, "records": []}) is None
    assert "varied by 46% in this run" in busy_host_warning(run(0.46))
