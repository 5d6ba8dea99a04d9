"""`zoo plan`'s answer for a resolved run: the analytic plan, the compiled step (--compile),
or zoo's and MaxText's compiled steps side by side (--compare maxtext); text or JSON."""

from __future__ import annotations

import json
from collections.abc import Callable

from benchmarks.plan.analytic import Plan, describe, make_plan
from benchmarks.plan.compare import compare as compare_plans
from benchmarks.plan.compare_table import describe as describe_comparison
from benchmarks.plan.tpu_step import compile_plan, describe_compiled
from zoo.app.run import Run


def plan_report(run: Run, target_mfu: float, compile_: bool, compare: str | None,
                as_json: bool, echo: Callable[..., object]) -> str:
    """What `zoo plan` prints last; `compare` needs `compile_` (the CLI checks it first).
    Compiling takes minutes: the analytic plan (text) and what is being compiled (stderr,
    so that JSON stays alone on stdout) are echoed before it starts."""
    what = f"{run.config.model_name} for {run.topology.name}"
    compiling = f"compiling {what} with the TPU compiler (a few minutes)..."
    if compare:
        record = compare_plans(run, target_mfu, lambda _: echo(
            f"compiling zoo's and MaxText's train steps of {what} with the TPU compiler "
            "(a few minutes)...", err=True)).record()
        return json.dumps(record, indent=2) if as_json else describe_comparison(record)
    if not compile_:
        result = make_plan(run, target_mfu)
        return json.dumps(result.record(), indent=2) if as_json else describe(result)

    def progress(analytic: Plan) -> None:
        if not as_json:
            echo(describe(analytic) + "\n")
        echo(compiling, err=True)

    compiled = compile_plan(run, target_mfu, progress)
    return json.dumps(compiled.record(), indent=2) if as_json else describe_compiled(
        compiled, analytic=False)
