"""Runs one benchmark entry in this process and prints its measurements as a JSON line.

    python -m benchmarks.worker '{"entry": {...}, "steps": 10, "peer": null, "profile": null}'

The harness starts one process per entry because the XLA device count is fixed per process.
Steps run on one synthetic batch already on the device, so only the step itself is timed.
A generation entry times generate calls instead (benchmarks/generation.py).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

from benchmarks import generation
from benchmarks.peers import PEERS
from benchmarks.suite import Entry
from core.backends.xla.profile import start_trace, stop_trace
from core.backends.xla.runtime import compile_stats, peak_memory, sync, sync_and_wait
from core.backends.xla.spmd import shard_batch
from core.hosts import current
from zoo.app.train import build_engine


def measure(entry: Entry, steps: int, peer: str | None, profile_dir: str | None,
            beside: str | None = None) -> dict:
    if entry.max_new_tokens:  # `steps` timed generate calls (`beside`'s alternating)
        return generation.measure(entry, steps, peer, profile_dir, beside)
    with tempfile.TemporaryDirectory() as scratch:
        if peer == "dtensor":  # zoo's model on the other backend, one process per device
            _, engine = build_engine(entry.run(f"out={scratch}"), backend="dtensor")
            return _time_eager_steps(engine, steps)
        _, engine = build_engine(
            entry.run(f"out={scratch}"),
            build_model=PEERS[peer][entry.model.split("-")[0]] if peer else None,
        )
        return _time_steps(engine, steps, profile_dir)


def _time_eager_steps(engine, steps: int) -> dict:
    """The dtensor backend's steps: eager ops, so a step's time is all host time."""
    batch = next(iter(engine.backend.loader([engine.data.batch(0)], engine.mesh, None)))
    start = time.perf_counter()
    for _ in range(2):  # torch.compile (on a GPU) and the optimizer's first steps
        engine.train_step(batch)
    engine.backend.materialize()
    warmup_s = time.perf_counter() - start
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        engine.train_step(batch)
        engine.backend.materialize()
        times.append(time.perf_counter() - start)
    compiles, compile_s = engine.backend.compile_stats()
    return {**_engine_facts(engine), "step_times_s": times, "host_times_s": None,
            "warmup_s": warmup_s, "compile_s": compile_s, "compiles_warmup": compiles,
            "compiles_timed": 0, "peak_memory_bytes": None}


def _engine_facts(engine) -> dict:
    return {
        "flops_per_step": engine.flops_per_step(),
        "items_per_step": engine.items_per_step(),
        "throughput_unit": engine.unit,
        "parameters": sum(p.numel() for p in engine.model.parameters()),
        "devices": engine.devices,
        "chips": engine.topology.chips,
        "bf16": engine.bf16,
    }


def _time_steps(engine, steps: int, profile_dir: str | None) -> dict:
    batch = shard_batch(engine.data.batch(0), engine.mesh)
    start = time.perf_counter()
    for _ in range(2):  # the step compiles (a lazy-state optimizer: again on step 2)
        engine.train_step(batch)
        sync()
    sync_and_wait()
    warmup_s = time.perf_counter() - start
    warm_compiles, compile_s = compile_stats()
    if profile_dir:
        start_trace(profile_dir)
    # Each timed step is synchronous (dispatch, then wait for the device): per-step times
    # are then real latencies, not the bursts that asynchronous dispatch produces. Host time
    # is Python tracing the step into torch_xla's graph; the device runs nothing meanwhile.
    # (sync's own hashing and dispatch are not split out: on the CPU backend sync may also
    # run the graph before it returns.)
    times, host_times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        engine.train_step(batch)
        host_times.append(time.perf_counter() - start)
        sync_and_wait()
        times.append(time.perf_counter() - start)
    if profile_dir:
        stop_trace()
    return {
        "step_times_s": times,
        "host_times_s": host_times,
        "warmup_s": warmup_s,
        "compile_s": compile_s,
        "compiles_warmup": warm_compiles,
        "compiles_timed": compile_stats()[0] - warm_compiles,
        "peak_memory_bytes": peak_memory(),
        **_engine_facts(engine),
    }


def main(argv: list[str]) -> None:
    job = json.loads(argv[0])
    record = measure(Entry(**job["entry"]), job["steps"], job.get("peer"), job.get("profile"),
                     job.get("beside"))
    if current().main:  # one record from a dtensor entry's processes
        print(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1:])
