"""Compile train steps for one TPU slice with libtpu (compile-only) and save their
`zoo plan --compile --json` records. One process per slice: the virtual device count is
fixed per process.
Usage (from the repo root): python -m tests.support.compile_worker OUT.json SLICE CASES_JSON
(CASES_JSON: a list of [model, [key=value overrides]])"""

import json
import sys
from pathlib import Path

from benchmarks.plan.tpu_step import compile_plan
from zoo.app.run import resolve_run


def main(out: str, slice_type: str, cases: str) -> None:
    records = []
    for model, overrides in json.loads(cases):
        record = compile_plan(resolve_run(model, [f"tpu={slice_type}", *overrides])).record()
        records.append({"case": [model, overrides], **record})
        print(model, overrides, "fits" if record["fits"] else "does NOT fit", flush=True)
    Path(out).write_text(json.dumps(records))


if __name__ == "__main__":
    main(*sys.argv[1:])
