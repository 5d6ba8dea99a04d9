"""Compile one decode step of a task's sampler for a TPU slice with libtpu (compile-only),
without its train step, and save `zoo plan --compile --json`'s `decode_step` record with the
figures the plan counts for it (the task's `placed`, core/sampler/footprint.py): the
analytic cache and the weights in the compute dtype, gathered over FSDP's axes.
Usage (from the repo root): python -m tests.support.decode_worker OUT.json SLICE MODEL
[key=value ...]"""

import json
import sys
from pathlib import Path

from benchmarks.plan.analytic import make_plan
from benchmarks.plan.decode_step import compile_decode
from benchmarks.plan.tpu_step import use_virtual_devices
from zoo.app.run import resolve_run


def main(out: str, slice_type: str, model: str, *overrides: str) -> None:
    run = resolve_run(model, [f"tpu={slice_type}", *overrides])
    use_virtual_devices(run.topology)
    cfg = run.built_config
    decode = compile_decode(run, run.task.sampling(cfg, run.mesh))
    planned = {entry.in_decode: entry.bytes for entry in make_plan(run, 0.5).placed}
    Path(out).write_text(json.dumps({**decode.record(run.topology, planned["cache"]),
                                     "planned_weight_bytes": planned["weights"]}))


if __name__ == "__main__":
    main(*sys.argv[1:])
