"""MaxText as a peer on the same compiler: run a llama entry's shapes through MaxText's own
trainer (JAX, synthetic data, fp32 or bf16 as the zoo run) on the same XLA devices, and
return its timings in the worker's record format so the harness reports both side by side.

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

from zoo.benchmarks.suite import Entry
from zoo.core import topology
from zoo.core.errors import UserError

ENV_SCRIPT = Path(__file__).resolve().parent / "maxtext_env.sh"
WARMUP_STEPS = 2  # as the zoo worker: the step compiles, then replays
STEP_LINE = re.compile(r"completed step: (\d+), seconds: ([0-9.]+)")
COMPILE_LINE = re.compile(r"Finished XLA compilation of jit\(train_step\) in ([0-9.]+) sec")
# MaxText's knob per zoo sharding preset: the devices go on this mesh axis.
PARALLELISM = {"fsdp": "ici_fsdp_parallelism"}
# MaxText's own default remat policy (base.yml): every decoder layer is recomputed.
DEFAULT_REMAT_POLICY = "full"


def unsupported(entry: Entry) -> str | None:
    """Why MaxText cannot run this entry's shapes, or None when it can."""
    if not entry.model.startswith("llama-"):
        return "the MaxText peer runs llama entries only"
    if entry.sharding not in PARALLELISM:
        return f"the MaxText peer maps sharding {', '.join(PARALLELISM)} only"
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


def maxtext_args(entry: Entry, cfg, devices: int, bf16: bool, steps: int, out: str) -> list[str]:
    """MaxText config keys for the zoo entry's model, batch, devices and remat."""
    model = cfg.model
    if cfg.global_batch_size % devices:
        raise UserError(f"{entry.name}: global_batch_size {cfg.global_batch_size} does not "
                        f"split over {devices} devices for MaxText's per-device batch")
    return [
        "run_name=zoo-bench",
        f"base_output_directory={out}",
        "hardware=cpu" if not topology.parse(entry.tpu).is_tpu else "hardware=tpu",
        "dataset_type=synthetic",
        "enable_checkpointing=false",
        "enable_tensorboard=false",
        "jax_cache_dir=",  # every run compiles: compile time is measured, not cached
        "log_config=false",
        "skip_jax_distributed_system=true",
        f"dtype={'bfloat16' if bf16 else 'float32'}",
        "weight_dtype=float32",
        "attention=dot_product",
        f"opt_type={cfg.optim.name}",
        "decoder_block=llama2",
        f"base_emb_dim={model.hidden_size}",
        f"base_mlp_dim={model.intermediate_size}",
        f"base_num_decoder_layers={model.num_hidden_layers}",
        f"base_num_query_heads={model.num_attention_heads}",
        f"base_num_kv_heads={model.num_key_value_heads}",
        f"head_dim={model.dim_per_head}",
        f"vocab_size={model.vocab_size}",
        f"max_target_length={cfg.seq_len}",
        f"per_device_batch_size={cfg.global_batch_size // devices}",
        f"{PARALLELISM[entry.sharding]}={devices}",
        f"scan_layers={'true' if 'scan' in entry.remat else 'false'}",
        f"remat_policy={DEFAULT_REMAT_POLICY}",
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
    import torch

    from zoo.compose import load_run_config
    from zoo.core.flops import train_flops

    if reason := unsupported(entry):
        raise UserError(f"{entry.name}: {reason}")
    family, cfg = load_run_config(entry.model, entry.train_overrides())
    topo = topology.parse(cfg.tpu)
    devices, bf16 = topo.devices, cfg.runs_in_bf16(topo)
    with torch.device("meta"):
        parameters = sum(p.numel() for p in family.build(cfg.model, init=False).parameters())
    interpreter = python()
    config = Path(interpreter).parents[1] / "lib"
    base_yml = next(config.glob("python3.*/site-packages/maxtext/configs/base.yml"), None)
    if base_yml is None:
        raise UserError(f"no maxtext/configs/base.yml under {config}; rebuild the environment "
                        f"(delete {config.parent} and rerun)")
    env = {**os.environ, "JAX_LOG_COMPILES": "1"}
    if not topo.is_tpu:
        env |= {"JAX_PLATFORMS": "cpu",
                "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run(
            [interpreter, "-m", "maxtext.trainers.pre_train.train", str(base_yml),
             *maxtext_args(entry, cfg, devices, bf16, steps, out)],
            capture_output=True, text=True, env=env, cwd=out,
        )
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        errors = [line for line in log.splitlines() if "Error" in line]
        raise UserError(f"MaxText failed on {entry.name}: "
                        f"{(errors or log.strip().splitlines() or ['no output'])[-1]}")
    items = family.task.items_per_step(cfg)
    return {
        **parse_log(log, steps),
        "peak_memory_bytes": None,
        "flops_per_step": train_flops(family.forward_flops(cfg)) * items,
        "items_per_step": items,
        "throughput_unit": family.task.unit,
        "parameters": parameters,
        "devices": devices,
        "chips": topo.chips,
        "bf16": bf16,
    }
