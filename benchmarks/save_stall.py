"""What a checkpoint costs the training loop, written synchronously and in background.

    python -m benchmarks.save_stall --out benchmarks/results/save-stall-cpu-2core

Trains a model (default llama-tiny, zoo train's default shape, one CPU device) and times
windows of `--window` steps, each step waited for: windows without a save, windows that save
after their first step synchronously, and windows that do so in background
(async_checkpoints, the default). Two numbers per save: the time the loop is blocked inside
`save()` (for a background save: the copy to host memory), and the window's time minus the
median plain window, which also counts what the writer thread takes from the steps running
beside it (this machine has 2 cores) and any wait for the write at the window's end. Modes
alternate, so slow spells of the host touch all three alike. Writes NAME.json and NAME.md.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import click

from core.backends.xla.runtime import sync_and_wait
from core.backends.xla.spmd import device_loader
from core.store.checkpoint import Checkpointer
from zoo.app.run import resolve_run
from zoo.app.train import build_engine

MODES = ("none", "sync", "async")


def timed_window(engine, loader, steps: int, checkpointer, step: int) -> tuple[float, float]:
    """(seconds for the window, seconds blocked in save())."""
    start, blocked = time.perf_counter(), 0.0
    for index in range(steps):
        engine.train_step(next(loader))
        sync_and_wait()
        if index == 0 and checkpointer is not None:
            before = time.perf_counter()
            checkpointer.save(step + index, engine.model, engine.optimizer, engine.scheduler)
            blocked = time.perf_counter() - before
    if checkpointer is not None:
        checkpointer.wait()
    return time.perf_counter() - start, blocked


@click.command()
@click.option("--repeats", default=5, show_default=True, help="Windows per mode.")
@click.option("--window", default=5, show_default=True, help="Steps per window.")
@click.option("--model", default="llama-tiny", show_default=True)
@click.option("--out", required=True, help="Results path without extension.")
@click.argument("overrides", nargs=-1)
def main(repeats: int, window: int, model: str, out: str, overrides: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        run, engine = build_engine(resolve_run(model, ["tpu=cpu-1", *overrides,
                                                       f"out={scratch}/run"]))
        loader = device_loader(engine.host_batches(0), engine.mesh, engine.data.batch(0))
        savers = {"none": None,
                  "sync": Checkpointer(f"{scratch}/sync", keep=1),
                  "async": Checkpointer(f"{scratch}/async", keep=1, async_save=True)}
        step = 0
        for mode in MODES:  # warm-up: compile the step, make the folders and groups
            timed_window(engine, loader, 2, savers[mode], step)
            step += 2
        times = {mode: [] for mode in MODES}
        blocked = {mode: [] for mode in MODES}
        for _ in range(repeats):
            for mode in MODES:
                seconds, in_save = timed_window(engine, loader, window, savers[mode], step)
                times[mode].append(seconds)
                blocked[mode].append(in_save)
                step += window
        size = sum(p.stat().st_size for p in Path(scratch, "sync").rglob("*") if p.is_file())
    plain = statistics.median(times["none"])
    step_time = plain / window
    saving = ("sync", "async")
    record = {
        "model": model, "overrides": list(overrides),
        "config": {"tpu": run.config.tpu, "global_batch_size": run.config.global_batch_size,
                   "seq_len": run.config.seq_len},
        "checkpoint_bytes": size, "window_steps": window, "repeats": repeats,
        "step_time_s": step_time, "window_s": times, "blocked_in_save_s": blocked,
        "blocked_s": {mode: statistics.median(blocked[mode]) for mode in saving},
        "stall_s": {mode: statistics.median(times[mode]) - plain for mode in saving},
    }
    lines = ["| save | blocked in save() s | window stall s | window stall in steps |",
             "|---|---|---|---|"]
    for mode in saving:
        stall, held = record["stall_s"][mode], record["blocked_s"][mode]
        click.echo(f"{mode}: blocked {held:.3f} s in save(), window stall {stall:.3f} s = "
                   f"{stall / step_time:.2f} steps (step {step_time:.3f} s, checkpoint "
                   f"{size / 2**20:.0f} MiB)")
        lines.append(f"| {mode} | {held:.3f} | {stall:.3f} | {stall / step_time:.2f} |")
    lines.append(f"\n{model} {' '.join(overrides)} on cpu-1, step {step_time:.3f} s, checkpoint "
                 f"{size / 2**20:.0f} MiB; medians of {repeats} windows of {window} steps.")
    Path(f"{out}.json").write_text(json.dumps(record, indent=1))
    Path(f"{out}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
