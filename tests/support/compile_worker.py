"""Compile train steps for TPU slices with libtpu (compile-only) and save their
`zoo plan --compile --json` records. The virtual device count is fixed per process, so one
process compiles for every slice of one device count (each process's start-up, torch_xla,
JAX and libtpu, costs more than a tiny model's compile).
Usage (from the repo root): python -m tests.support.compile_worker OUT.json JOBS_JSON
(JOBS_JSON: a list of [slice, [[model, [key=value overrides]], ...]], every slice with the
same number of devices)"""

import json
import sys
from pathlib import Path

from benchmarks.plan.tpu_step import compile_plan
from zoo.app.run import resolve_run


def main(out: str, jobs: str) -> None:
    records = []
    for slice_type, cases in json.loads(jobs):
        for model, overrides in cases:
            record = compile_plan(resolve_run(model, [f"tpu={slice_type}", *overrides])).record()
            records.append({"case": [model, overrides], **record})
            print(slice_type, model, overrides, "fits" if record["fits"] else "does NOT fit",
                  flush=True)
    Path(out).write_text(json.dumps(records))


if __name__ == "__main__":
    main(*sys.argv[1:])
