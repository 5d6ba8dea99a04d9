"""`zoo plan MODEL --tpu SLICE --compile --compare maxtext`: zoo's exact train step and
MaxText 0.2.5's own train step for the same shapes (benchmarks/maxtext_keys.py), compiled
for the same slice by ONE libtpu -- MaxText's, in its environment
(benchmarks/plan/maxtext_compile_worker.py) -- and counted by one piece of code
(benchmarks/plan/tpu_compile.py), with a step-time model that counts communication
(benchmarks/plan/step_model.py). Nothing runs on a TPU: the compiler's numbers and a model."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import maxtext
from benchmarks.maxtext_keys import maxtext_keys
from benchmarks.plan.analytic import Plan, make_plan
from benchmarks.plan.step_model import StepModel, project
from benchmarks.plan.tpu_compile import CompiledStep, compile_target, compiled_step
from benchmarks.plan.tpu_step import trace_step_hlo
from core.errors import UserError
from core.out_of_memory import OutOfMemory
from zoo.app.run import Run

WORKER = Path(__file__).resolve().parent / "maxtext_compile_worker.py"
SIDES = ("zoo", "maxtext")
TORCH_XLA_ENV = ("TPU_LIBRARY_PATH", "XLA_FLAGS", "PJRT_DEVICE", "PJRT_DYNAMIC_PLUGINS",
                 "CPU_NUM_DEVICES", "XLA_USE_SPMD")


@dataclasses.dataclass
class Comparison:
    """Both compiled steps of one run config on one slice, per chip."""

    analytic: Plan  # model FLOPs (the MFU numerator) and the slice
    compiled: dict[str, CompiledStep | OutOfMemory]  # side -> what the compiler made of it
    maxtext_keys: list[str]  # MaxText's settings for the zoo config
    versions: dict  # the compiler both sides went through, and zoo's tracing stack
    attention: str  # what zoo's program computes attention with
    trace_seconds: float

    @property
    def model_flops_per_chip(self) -> float:
        return self.analytic.flops_per_step / self.analytic.topology.chips

    def fits(self, side: str) -> bool:
        """The compiler kept the program and its total (arguments included) fits a chip."""
        step = self.compiled[side]
        return isinstance(step, CompiledStep) and step.total_bytes <= self.analytic.hbm_bytes

    def step_model(self, side: str) -> StepModel | None:
        step = self.compiled[side]
        if not isinstance(step, CompiledStep):
            return None
        return project(step.matmul_flops, step.bytes_accessed, step.collectives,
                       self.analytic.topology, step.dcn_collectives)

    def record(self) -> dict:
        """The `--json` record: both sides, every number the table shows."""
        plan, topo = self.analytic, self.analytic.topology
        return {"model": plan.model, "slice": topo.name, "generation": topo.generation,
                "chips": topo.chips, "slices": topo.slices, "mesh": plan.mesh,
                "hbm_per_chip": plan.hbm_bytes, "attention": self.attention,
                "versions": self.versions, "maxtext_keys": self.maxtext_keys,
                "model_flops_per_chip": self.model_flops_per_chip,
                "zoo_trace_seconds": self.trace_seconds,
                **{side: self.side_record(side) for side in SIDES}}

    def side_record(self, side: str) -> dict:
        step = self.compiled[side]
        if isinstance(step, OutOfMemory):
            return {"fits": False, "compile_seconds": step.compile_seconds,
                    "hbm": {"refused": True, "program_at_least": step.program_bytes,
                            "usable": step.usable_bytes, "largest_allocations": step.largest}}
        model = self.step_model(side)
        peak = self.analytic.topology.peak_bf16_flops_per_chip
        return {
            "fits": self.fits(side),
            "hbm": {"arguments": step.argument_bytes, "outputs": step.output_bytes,
                    "aliased": step.alias_bytes, "temporaries": step.temp_bytes,
                    "generated_code": step.code_bytes, "total": step.total_bytes},
            "collectives": step.collectives,
            "dcn_collectives": step.dcn_collectives,
            "matmul_flops": step.matmul_flops,
            "matmul_flops_loop_bodies_once": step.matmul_flops_once,
            "cost_analysis": {"flops": step.flops, "bytes_accessed": step.bytes_accessed},
            "loop_trips": step.loop_trips,
            "compile_seconds": step.compile_seconds,
            "projected_step": {**model.record(),
                               "mfu": model.mfu(self.model_flops_per_chip, peak)},
        }


def compare(run: Run, target_mfu: float = 0.5,
            progress: Callable[[Plan], object] | None = None) -> Comparison:
    """Trace zoo's step, compile it and MaxText's with MaxText's libtpu, count both;
    `progress` is handed the analytic plan once the checks pass, before the minutes of
    compiling."""
    analytic = make_plan(run, target_mfu)
    topo = run.topology
    compile_target(topo)  # a slice the compiler cannot target fails first
    keys = maxtext_keys(run.family.name, run.config, topo)  # so does a setting MaxText can't take
    interpreter = maxtext.python()
    if progress:
        progress(analytic)
    start = time.perf_counter()
    text, attention, _ = trace_step_hlo(run)
    traced = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as out:
        args = [str(maxtext.base_yml(interpreter)), "run_name=zoo-plan",
                f"base_output_directory={out}", "dataset_type=synthetic",
                "enable_checkpointing=false", "log_config=false",
                f"compile_topology={topo.generation}-{topo.slice_name.rsplit('-', 1)[1]}",
                f"compile_topology_num_slices={topo.slices}", *keys]
        record = run_worker(interpreter, text, args, Path(out))
        compiled = {side: compiled_step(record[side], Path(record[side]["hlo_file"]).read_text()
                                        if "hlo_file" in record[side] else "")
                    for side in SIDES}
    versions = {"compiler": {**record["versions"], "platform": record["platform_version"]},
                "zoo_trace": {name: importlib.metadata.version(name)
                              for name in ("torch", "torch_xla", "jax", "libtpu")}}
    return Comparison(analytic, compiled, keys, versions, attention, traced)


def run_worker(interpreter: str, hlo_text: str, args: list[str], out: Path) -> dict:
    """Both programs compiled in MaxText's environment: the worker's JSON record."""
    (out / "zoo.hlo").write_text(hlo_text)
    spec = out / "spec.json"
    spec.write_text(json.dumps({"zoo_hlo": str(out / "zoo.hlo"), "maxtext_args": args,
                                "out": str(out)}))
    # not what torch_xla set up in this process: above all not TPU_LIBRARY_PATH, which would
    # load zoo's libtpu into MaxText's JAX
    env = {key: value for key, value in os.environ.items() if key not in TORCH_XLA_ENV}
    env |= {"TPU_SKIP_MDS_QUERY": "1", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    # -P: nothing in the worker's folder may shadow a module of MaxText's environment
    proc = subprocess.run([interpreter, "-P", str(WORKER), str(spec)], capture_output=True,
                          text=True, env=env, cwd=out)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
        errors = [line for line in (proc.stdout + proc.stderr).splitlines()
                  if "Error" in line or "error:" in line]
        raise UserError("compiling in MaxText's environment failed: "
                        + (errors or lines or ["no output"])[-1][:500])
    return json.loads(lines[-1])
