"""`zoo bench`: run a suite entry by entry (one process each), compute throughput and MFU
against a peak measured right before each entry, write results.json / results.md / a plot,
and gate on a committed baseline."""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

from benchmarks import generation, maxtext
from benchmarks.calibration import RunPeaks, peak_dtype
from benchmarks.peers import PEERS, PEERS_MISSING
from benchmarks.suite import Entry
from benchmarks.worker_process import ROOT, EntryFailed, run_worker
from core import topology
from core.errors import UserError


def run_entry(entry: Entry, steps: int, peer: str | None, profile_dir: str | None,
              log_dir: Path | None = None, beside: str | None = None) -> dict:
    """The entry's measurements from its own worker process (benchmarks/worker_process.py:
    a crashed worker runs once more; a failed one leaves its whole log in `log_dir`). A
    generation entry's zoo run with `beside` hf times both there, calls alternating
    (benchmarks/generation.py): {"sides": {impl: measurements}}."""
    if peer == "maxtext":  # its own trainer in its own environment
        return maxtext.measure(entry, steps)
    job = {"entry": dataclasses.asdict(entry), "steps": steps, "peer": peer, "profile": profile_dir,
           "beside": beside}
    launcher = [sys.executable]
    if peer == "dtensor":  # one process per device, as `zoo train --backend dtensor` runs
        devices = topology.parse(entry.tpu).devices
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={devices}"]
    return run_worker(launcher, job, f"{entry.name} ({peer or 'zoo'})", log_dir)


def summarize(entry: Entry, impl: str, raw: dict, peak: float | None) -> dict:
    """One results record: the measurements plus derived throughput, TFLOP/s and MFU
    (against `peak`, the run's CPU peak, on CPU); a generation entry's its own
    (benchmarks/generation.py)."""
    if entry.max_new_tokens:
        return generation.summarize(entry, impl, raw)
    topo = topology.parse(entry.tpu)
    times = raw["step_times_s"]
    median = statistics.median(times)
    per_chip_divisor = topo.per_chip(raw["devices"])
    if topo.is_tpu:
        peak_flops, peak_source = topo.peak_bf16_flops, topo.peak_description
    elif peak:
        peak_flops = peak
        peak_source = f"host {'bfloat16' if raw['bf16'] else 'float32'} XLA matmul"
    else:
        peak_flops, peak_source = None, None
    items_per_s = raw["items_per_step"] / median
    flops_per_s = raw["flops_per_step"] / median
    return {
        "name": entry.name,
        "impl": impl,
        "model": entry.model,
        "tpu": entry.tpu,
        "slices": topo.slices,  # over the data-center network (2xv6e-256: 2)
        "sharding": entry.sharding,
        "remat": entry.remat,
        "global_batch_size": entry.global_batch_size,
        "seq_len": entry.seq_len,
        "overrides": entry.overrides,
        "parameters": raw["parameters"],
        "devices": raw["devices"],
        "precision": "bf16" if raw["bf16"] else "fp32",
        "compile_s": raw["compile_s"],
        "warmup_s": raw["warmup_s"],
        "step_time_median_s": median,
        # total / steps: the throughput a loop with bursty (asynchronously dispatched) step
        # times really had, as MaxText's logged ones are; equal to the median when steady
        "step_time_mean_s": statistics.mean(times),
        "step_time_min_s": min(times),
        "step_time_max_s": max(times),
        # Python tracing the step (torch_xla); None for peers outside torch_xla.
        "host_time_median_s": (
            statistics.median(raw["host_times_s"]) if raw.get("host_times_s") else None
        ),
        "timed_steps": len(times),
        "throughput_unit": raw["throughput_unit"],  # tokens (LMs) or examples
        "items_per_s": items_per_s,
        "items_per_s_per_chip": items_per_s / per_chip_divisor,
        "model_tflops_per_s_per_chip": flops_per_s / per_chip_divisor / 1e12,
        "mfu": flops_per_s / peak_flops if peak_flops else None,
        "peak_flops": peak_flops,
        "peak_source": peak_source,
        "attention_flops": "causal",
        "compiles_timed": raw["compiles_timed"],
        "peak_memory_bytes": raw["peak_memory_bytes"],
        # the logs of worker attempts that crashed before this one (the entry was rerun)
        "crashed_logs": raw.get("crashed_logs", []),
    }


def environment() -> dict:
    def version(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        or None
    )
    return {
        "torch": version("torch"),
        "torch_xla": version("torch_xla"),
        "transformers": version("transformers"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "host_cpus": _cpu_count(),
        "git_commit": commit,
    }


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def run_suite(
    entries: list[Entry], steps: int, compare: str | None, mfu: bool, profile_dir: str | None,
    log_dir: Path | None = None,
) -> dict:
    """Every entry (then every peer run), each right after a CPU peak measurement. An entry
    whose worker fails is left out of the records and listed under `failed` (with the file
    holding its worker's log): the other entries' results are kept."""
    peered = {e.name for e in entries if runs_peer(e, compare)}
    # a generation entry's peer runs beside zoo in zoo's own job (benchmarks/generation.py)
    jobs = [(e, None) for e in entries] + [(e, compare) for e in entries
                                           if e.name in peered and not e.max_new_tokens]
    dtypes = {e.name: peak_dtype(e) for e in entries if not e.max_new_tokens} if mfu else {}
    peaks, timed, failed = RunPeaks(), [], []
    for entry, peer in tqdm(jobs, desc="bench", unit="entry"):
        dtype = dtypes.get(entry.name)
        before = peaks.measure(dtype) if dtype else None
        beside = compare if entry.max_new_tokens and entry.name in peered else None
        try:
            raw = run_entry(entry, steps, peer, _profile_path(profile_dir, entry, peer), log_dir,
                            beside)
        except EntryFailed as error:
            tqdm.write(f"{error}; going on with the other entries")
            failed.append({"name": entry.name, "impl": peer or "zoo", "error": str(error),
                           "log": str(error.log)})
            continue
        sides = raw.get("sides") or {peer or "zoo": raw}
        for impl, side in sides.items():
            side.setdefault("crashed_logs", raw.get("crashed_logs", []))
            timed.append((entry, impl, side, dtype, before))
            tqdm.write(
                f"{entry.name} ({impl}): {_median_line(side)}"
                + (f", CPU peak right before {before.flops / 1e9:.0f} GFLOP/s" if before else "")
            )
    if not timed:
        raise UserError("every benchmark entry failed: "
                        + "; ".join(f["error"] for f in failed))
    records = []
    for entry, impl, raw, dtype, before in timed:
        records.append(summarize(entry, impl, raw, peaks.peak(dtype) if dtype else None))
        records[-1]["peak_before_entry_flops"] = before.flops if before else None
    relate_to_reference(records, records[0])
    return {
        "environment": environment(),
        "calibration": peaks.summary(),
        "reference_entry": records[0]["name"],
        "records": records,
        "failed": failed,
    }


def _median_line(raw: dict) -> str:
    if "step_times_s" in raw:
        return f"median step {statistics.median(raw['step_times_s']):.3f} s"
    return (f"median prefill {statistics.median(raw['prefill_s']):.3f} s, decode "
            f"{statistics.median(raw['decode_s']):.3f} s")


def runs_peer(entry: Entry, peer: str | None) -> bool:
    """HF runs entries without remat: it has no LayerStack to scan, and its decoder layers
    take keyword arguments that torch_xla's (reentrant) checkpoint cannot pass. MaxText runs
    the entries whose settings it has a counterpart of (benchmarks/maxtext_keys.py). A
    generation entry's peer is transformers' `generate` (hf) only."""
    if entry.max_new_tokens and peer:
        if peer != "hf":
            tqdm.write(f"{entry.name}: no {peer} run (a generation entry compares with "
                       "transformers' generate: --compare hf)")
            return False
        if entry.run().family.hf_class is None:
            tqdm.write(f"{entry.name}: no hf run ({entry.model} has no transformers class)")
            return False
        return True
    if peer == "hf":
        family = entry.model.split("-")[0]
        if family not in PEERS["hf"]:
            tqdm.write(f"{entry.name}: no HF run ({PEERS_MISSING.get(family, 'no peer')})")
        return entry.remat == "none" and family in PEERS["hf"]
    if peer == "dtensor":
        if reason := dtensor_unsupported(entry):
            tqdm.write(f"{entry.name}: no dtensor run ({reason})")
        return reason is None
    if peer == "maxtext":
        if reason := maxtext.unsupported(entry):
            tqdm.write(f"{entry.name}: no MaxText run ({reason})")
        return reason is None
    return False


def dtensor_unsupported(entry: Entry) -> str | None:
    """Why the dtensor backend cannot run an entry (core/backends/dtensor.py refuses the
    same), or None."""
    other_axes = [o for o in entry.overrides
                  if o.startswith(("mesh.tensor", "mesh.sequence", "mesh.expert", "mesh.dcn"))]
    if other_axes:
        return f"{' '.join(other_axes)}: FSDP2 shards over data and fsdp only"
    if entry.remat.startswith("scan"):
        return f"remat {entry.remat} is torch_xla's scan"
    return None


def relate_to_reference(records: list[dict], reference: dict) -> None:
    """Step time over the reference entry's, timed in the same run: the machine's speed of
    the moment divides out."""
    for record in records:
        record["step_time_vs_reference"] = (
            record["step_time_median_s"] / reference["step_time_median_s"]
        )


def _profile_path(profile_dir: str | None, entry: Entry, peer: str | None) -> str | None:
    return str(Path(profile_dir) / f"{entry.name}-{peer or 'zoo'}") if profile_dir else None


def compare_ratios(records: list[dict]) -> list[tuple[str, str, float]]:
    """(entry, peer, zoo step time / peer step time) for every training entry run by both:
    below 1.0 the zoo's step is faster. (Generation entries: generation.ratios.)"""
    trained = [r for r in records if r.get("kind") != generation.KIND]
    zoo = {r["name"]: r for r in trained if r["impl"] == "zoo"}
    return [
        (r["name"], r["impl"], zoo[r["name"]]["step_time_median_s"] / r["step_time_median_s"])
        for r in trained
        if r["impl"] != "zoo" and r["name"] in zoo
    ]
