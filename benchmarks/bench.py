"""`zoo bench`: a suite chosen and filtered, run, reported and written, then judged against a
baseline by the regression gate when one is given."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from benchmarks import generation, harness, report
from benchmarks.gate import confirmed_regressions, load_baseline
from benchmarks.suite import load_suite
from core.errors import UserError
from core.store.location import local_folder


@dataclasses.dataclass(frozen=True)
class BenchRequest:
    """`zoo bench`'s options as given."""

    suite: str
    steps: int
    out: str
    mfu: bool = False
    models: str | None = None
    tpu: str | None = None
    compare: str | None = None
    baseline: str | None = None
    tolerance: float = 0.20
    profile_dir: str | None = None
    backend: str = "xla"


def bench(request: BenchRequest, echo: Callable[..., object]) -> None:
    """Run the request's suite and print what it found; a confirmed regression is an error."""
    compare = request.compare
    if request.backend == "dtensor":
        if compare:
            raise UserError("--backend dtensor and --compare each add a second row per entry; "
                            "use one of them")
        compare = "dtensor"
    local_folder(request.out, "--out")
    entries = load_suite(request.suite)
    if request.models:
        wanted = set(request.models.split(","))
        entries = [e for e in entries if e.model in wanted]
        if not entries:
            raise UserError(f"no entries of {sorted(wanted)} in suite {request.suite}")
    if request.tpu:
        entries = [dataclasses.replace(e, tpu=request.tpu) for e in entries]
    baseline = load_baseline(request.baseline) if request.baseline else None
    mfu = request.mfu or baseline is not None  # the gate compares MFU
    results = harness.run_suite(entries, request.steps, compare, mfu, request.profile_dir,
                                log_dir=Path(request.out) / "logs")
    ratios = harness.compare_ratios(results["records"])
    generation_ratios = generation.ratios(results["records"])
    echo(report.table(results["records"]))
    echo(report.footnote(results))
    if warning := report.busy_host_warning(results):
        echo(warning, err=True)
    for name, peer, ratio in ratios:
        echo(f"{name}: step time zoo / {peer} = {ratio:.2f}")
    for ratio in generation_ratios:
        echo(generation.ratio_line(ratio))
    report.write(results, ratios, Path(request.out), generation_ratios)
    echo(f"wrote {request.out}/results.json, results.md, results.png")
    if baseline is not None:
        regressions = confirmed_regressions(results, entries, baseline, request.tolerance,
                                            request.steps)
        if regressions:
            raise UserError(f"worse than the baseline by more than {request.tolerance:.0%}, "
                            "twice: " + "; ".join(regressions))
        echo(f"gate passed: no MFU fell, and no step time relative to "
             f"{results['reference_entry']} grew, by more than {request.tolerance:.0%}")
    if results["failed"]:  # the others' results are written above
        raise UserError(f"{len(results['failed'])} benchmark entr"
                        f"{'y' if len(results['failed']) == 1 else 'ies'} failed (the others' "
                        f"results are in {request.out}): "
                        + "; ".join(f["error"] for f in results["failed"]))
