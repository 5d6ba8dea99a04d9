"""One process of `zoo plan --search`: compiles candidates of one model on one slice, one at
a time, as they arrive on stdin (a JSON list of overrides per line), and answers each with a
line `RESULT <json>` on stdout. One process serves many candidates (torch_xla and libtpu
start once); the search kills and replaces it when a compile runs past its time.

    python -m benchmarks.plan.search_worker MODEL TPU
"""

from __future__ import annotations

import json
import resource
import sys

from benchmarks.plan.tpu_step import compile_plan
from core.errors import UserError
from zoo.app.run import resolve_run

MARK = "RESULT "  # what the search reads; anything else a library prints is left alone


def answer(model: str, tpu: str, overrides: list[str]) -> dict:
    """The compiled plan's record, or the one-line reason `zoo train` would refuse it."""
    try:
        compiled = compile_plan(resolve_run(model, [f"tpu={tpu}", *overrides]))
    except (UserError, ValueError) as error:
        return {"error": str(error)}
    return {"fits": compiled.fits, "record": compiled.record(),
            "peak_host_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main(model: str, tpu: str) -> None:
    for line in sys.stdin:
        result = answer(model, tpu, json.loads(line))
        print(MARK + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
