"""MaxText as a peer on the same compiler: run a decoder entry's settings (llama, mixtral,
qwen3, qwen3moe; benchmarks/maxtext_keys.py) through MaxText's own trainer (JAX, synthetic
data) on the same XLA devices, and return its timings in the worker's record format so the
harness reports both side by side.

MaxText lives in its own environment (benchmarks/maxtext_env.sh builds it on first use):
it needs Python >= 3.12 and a JAX of its own. Model FLOPs and parameters are the zoo's
formula for the same shapes, so the two implementations are divided by the same work.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import torch

from benchmarks.maxtext_keys import maxtext_keys
from benchmarks.suite import Entry
from core.errors import UserError
from core.flops import train_flops

ENV_SCRIPT = Path(__file__).resolve().parent / "maxtext_env.sh"
WARMUP_STEPS = 2  # as the zoo worker: the step compiles, then replays
STEP_LINE = re.compile(r"completed step: (\d+), seconds: ([0-9.]+)")
COMPILE_LINE = re.compile(r"Finished XLA compilation of jit\(train_step\) in ([0-9.]+) sec")


def unsupported(entry: Entry) -> str | None:
    """Why MaxText cannot run this entry's settings, or None when it can."""
    run = entry.run()
    try:
        maxtext_keys(run.family.name, run.config, run.topology)
    except UserError as error:
        return str(error)
    return None


def python() -> str:
    """The MaxText environment's python, built on first use."""
    proc = subprocess.run(["bash", str(ENV_SCRIPT)], capture_output=True, text=True)
    if proc.returncode != 0:
        reason = [line for line in proc.stderr.splitlines() if "maxtext_env:" in line]
        raise UserError(
            "could not build the MaxText environment: "
            + (reason[-1] if reason else proc.stderr.strip().splitlines()[-1])
            + f" (run {ENV_SCRIPT} to see why)"
        )
    return proc.stdout.strip().splitlines()[-1]


def base_yml(interpreter: str) -> Path:
    """MaxText's base config in the environment of `interpreter`."""
    lib = Path(interpreter).parents[1] / "lib"
    found = next(lib.glob("python3.*/site-packages/maxtext/configs/base.yml"), None)
    if found is None:
        raise UserError(f"no maxtext/configs/base.yml under {lib}; rebuild the environment "
                        f"(delete {lib.parent} and rerun)")
    return found


def maxtext_args(entry: Entry, run, steps: int) -> list[str]:
    """MaxText config keys for the zoo entry's run (benchmarks/maxtext_keys.py) and for a
    timed run of it; the entry's own MaxText keys come last and win."""
    topo = run.topology
    return [
        "run_name=zoo-bench",
        "hardware=tpu" if topo.is_tpu else "hardware=cpu",
        "dataset_type=synthetic",
        "enable_checkpointing=false",
        "enable_tensorboard=false",
        "jax_cache_dir=",  # every run compiles: compile time is measured, not cached
        "log_config=false",
        "skip_jax_distributed_system=true",
        *maxtext_keys(run.family.name, run.config, topo),
        f"steps={WARMUP_STEPS + steps}",
        *entry.maxtext,
    ]


def parse_log(log: str, steps: int) -> dict:
    """Step and compile times from MaxText's log: the last `steps` step lines are timed;
    train_step compiles before the first timed step count as warmup, later ones as timed."""
    events = []
    for line in log.splitlines():
        if match := STEP_LINE.search(line):
            events.append(("step", float(match.group(2))))
        elif match := COMPILE_LINE.search(line):
            events.append(("compile", float(match.group(1))))
    step_indices = [i for i, (kind, _) in enumerate(events) if kind == "step"]
    if len(step_indices) < WARMUP_STEPS + steps:
        raise UserError(f"MaxText logged {len(step_indices)} steps, expected "
                        f"{WARMUP_STEPS + steps}")
    first_timed = step_indices[-steps]
    compiles = [(i, s) for i, (kind, s) in enumerate(events) if kind == "compile"]
    return {
        "step_times_s": [events[i][1] for i in step_indices[-steps:]],
        "warmup_s": sum(events[i][1] for i in step_indices[:-steps]),
        "compile_s": sum(s for _, s in compiles),
        "compiles_warmup": sum(1 for i, _ in compiles if i < first_timed),
        "compiles_timed": sum(1 for i, _ in compiles if i > first_timed),
    }


def measure(entry: Entry, steps: int) -> dict:
    """Run the entry through MaxText; a record like the zoo worker's (no host time: a jitted
    JAX step is not traced per step)."""
    run = entry.run()
    family, cfg, topo = run.family, run.config, run.topology
    devices, bf16 = topo.devices, cfg.runs_in_bf16(topo)
    with torch.device("meta"):
        parameters = sum(p.numel() for p in family.build(cfg.model, init=False).parameters())
    args = maxtext_args(entry, run, steps)  # unmappable keys fail first
    interpreter = python()
    env = {**os.environ, "JAX_LOG_COMPILES": "1"}
    if not topo.is_tpu:
        env |= {"JAX_PLATFORMS": "cpu",
                "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run(
            [interpreter, "-m", "maxtext.trainers.pre_train.train", str(base_yml(interpreter)),
             f"base_output_directory={out}", *args],
            capture_output=True, text=True, env=env, cwd=out,
        )
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        errors = [line for line in log.splitlines() if "Error" in line]
        raise UserError(f"MaxText failed on {entry.name}: "
                        f"{(errors or log.strip().splitlines() or ['no output'])[-1]}")
    items = run.task.items_per_step(cfg)
    return {
        **parse_log(log, steps),
        "peak_memory_bytes": None,
        "flops_per_step": train_flops(family.forward_flops(cfg)) * items,
        "items_per_step": items,
        "throughput_unit": run.task.unit,
        "parameters": parameters,
        "devices": devices,
        "chips": topo.chips,
        "bf16": bf16,
    }
