"""The regression gate of `zoo bench --baseline`: it judges what holds still on a shared host
and fails only on a regression that a second timing confirms.

Judged per entry and implementation, against the baseline's same record: MFU (against the
run's own CPU peak, so the host's speed divides out) may fall, and step time relative to the
reference entry timed in the same run may grow, by at most the tolerance. A neighbour's load
can slow one entry once; a regression slows it every time, so failing entries are timed again
and only failures seen both times count.
"""

from __future__ import annotations

import json
from pathlib import Path

from tqdm import tqdm

from benchmarks.calibration import peak_dtype
from benchmarks.harness import relate_to_reference, run_entry, summarize
from benchmarks.suite import Entry
from core.errors import UserError


def load_baseline(path: str) -> dict:
    """A results.json of an earlier `zoo bench`, read before the run so a bad one fails fast."""
    try:
        baseline = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        baseline = None
    if not isinstance(baseline, dict) or not isinstance(baseline.get("records"), list):
        raise UserError(f"baseline {path} is not a zoo bench results.json "
                        "(make one with `zoo bench --mfu --out DIR`)")
    return baseline


def judge(results: dict, baseline: dict, tolerance: float) -> dict[tuple[str, str], str]:
    """(entry, impl) -> what fell too far. Entries missing from either side are not judged,
    nor ratios to a different reference entry."""
    base = {(r["name"], r["impl"]): r for r in baseline["records"]}
    same_reference = results.get("reference_entry") == baseline.get("reference_entry")
    failed = {}
    for record in results["records"]:
        key = (record["name"], record["impl"])
        old = base.get(key)
        if old is None:
            continue
        problems = []
        if old.get("mfu") and record.get("mfu") and record["mfu"] < old["mfu"] * (1 - tolerance):
            problems.append(f"MFU {record['mfu']:.2%} vs baseline {old['mfu']:.2%}")
        ratio, old_ratio = record.get("step_time_vs_reference"), old.get("step_time_vs_reference")
        if same_reference and ratio and old_ratio and ratio > old_ratio * (1 + tolerance):
            problems.append(
                f"step time {ratio:.2f}x {results['reference_entry']}'s vs baseline "
                f"{old_ratio:.2f}x"
            )
        if problems:
            failed[key] = f"{record['name']} ({record['impl']}): " + ", ".join(problems)
    return failed


def confirmed_regressions(results: dict, entries: list[Entry], baseline: dict,
                          tolerance: float, steps: int) -> list[str]:
    """The failures that hold when the failing entries are timed a second time."""
    failed = judge(results, baseline, tolerance)
    if not failed:
        return []
    tqdm.write("outside the tolerance, timing again: " + "; ".join(failed.values()))
    by_name = {entry.name: entry for entry in entries}
    reference = next(r for r in results["records"] if r["name"] == results["reference_entry"])
    retimed = []
    for name, impl in failed:
        entry = by_name[name]
        raw = run_entry(entry, steps, None if impl == "zoo" else impl, None)
        retimed.append(summarize(entry, impl, raw, _run_peak(results, entry)))
    relate_to_reference(retimed, reference)
    return list(judge({**results, "records": retimed}, baseline, tolerance).values())


def _run_peak(results: dict, entry: Entry) -> float | None:
    dtype = peak_dtype(entry)
    calibration = results.get("calibration") or {}
    return calibration[dtype]["peak_flops"] if dtype in calibration else None
