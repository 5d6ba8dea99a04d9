"""Compile one decode step of a task's sampler for a TPU slice with libtpu (compile-only),
without its train step, and save `zoo plan --compile --json`'s `decode_step` record with the
figures the plan counts for it: the analytic cache (core/sampler/footprint.py, via the
task's `placed`) and the weights' shards in the compute dtype.
Usage (from the repo root): python -m tests.support.decode_worker OUT.json SLICE MODEL
[key=value ...]"""

import json
import sys
from pathlib import Path

from benchmarks.plan.analytic import make_plan
from benchmarks.plan.decode_step import compile_decode
from benchmarks.plan.tpu_step import use_virtual_devices
from core.sharding import plan_params
from zoo.app.run import resolve_run


def main(out: str, slice_type: str, model: str, *overrides: str) -> None:
    run = resolve_run(model, [f"tpu={slice_type}", *overrides])
    use_virtual_devices(run.topology)
    cfg = run.built_config
    decode = compile_decode(run, run.task.sampling(cfg, run.mesh))
    (cache,) = [entry for entry in make_plan(run, 0.5).placed if not entry.in_step]
    bytes_per_value = 2 if cfg.runs_in_bf16(run.topology) else 4
    weights = sum(p.shard_bytes // 4 * bytes_per_value
                  for p in plan_params(run.meta_model(cfg.model), run.rules, run.mesh))
    Path(out).write_text(json.dumps({**decode.record(run.topology, cache.bytes),
                                     "planned_weight_bytes": weights}))


if __name__ == "__main__":
    main(*sys.argv[1:])
