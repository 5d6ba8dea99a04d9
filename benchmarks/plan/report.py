"""`zoo plan`'s answer for a resolved run: the analytic plan, the compiled step (--compile),
or zoo's and MaxText's compiled steps side by side (--compare maxtext); text or JSON."""

from __future__ import annotations

import json

from benchmarks.plan.analytic import describe, make_plan
from benchmarks.plan.compare import compare as compare_plans
from benchmarks.plan.compare_table import describe as describe_comparison
from benchmarks.plan.tpu_step import compile_plan, describe_compiled
from zoo.app.run import Run


def plan_report(run: Run, target_mfu: float, compile_: bool, compare: str | None,
                as_json: bool) -> str:
    """What `zoo plan` prints; `compare` needs `compile_` (the CLI checks it first)."""
    if compare:
        record = compare_plans(run, target_mfu).record()
        return json.dumps(record, indent=2) if as_json else describe_comparison(record)
    if not compile_:
        result = make_plan(run, target_mfu)
        return json.dumps(result.record(), indent=2) if as_json else describe(result)
    compiled = compile_plan(run, target_mfu)
    return json.dumps(compiled.record(), indent=2) if as_json else describe_compiled(compiled)
