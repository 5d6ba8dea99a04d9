"""Stress for the scanned step's crash (issue 62): many processes, each running a scanned
entry's step many times with asynchronous dispatch, the way a training loop overlaps
tracing step N+1 with step N's execution -- the window in which torch_xla's scan used to
lower the previous step's unfinished outputs and die of SIGSEGV
(core/backends/xla/scan_backward.py). The benchmark worker meets that overlap once per
process (its second warm-up step; its timed steps wait for each step), and crashed there:
here every step overlaps, and the processes are fresh, since the first overlap (after the
slowest, first execution) is the likeliest to crash.

    python -m benchmarks.scan_stress --processes 10 --steps 50
    python -m benchmarks.scan_stress --processes 10 --steps 50 --unguarded  # the cause

`--unguarded` turns the backward's wait off, to show the crash it prevents. Prints one line
per process and a total: steps run, processes crashed (and by which signal).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import click

from benchmarks.suite import load_suite


@click.command()
@click.option("--suite", default="default", show_default=True, help="Suite holding the entry.")
@click.option("--entry", "entry_name", default="tiny-scan-4dev", show_default=True,
              help="A scanned entry (remat scan or scan_checkpoint).")
@click.option("--processes", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=50, show_default=True,
              help="Steps per process, each dispatched without waiting for the last.")
@click.option("--unguarded", is_flag=True,
              help="Without the scan backward's wait for the devices (to see the crash).")
def main(suite: str, entry_name: str, processes: int, steps: int, unguarded: bool) -> None:
    entry = next((e for e in load_suite(suite) if e.name == entry_name), None)
    if entry is None or not entry.remat.startswith("scan"):
        raise click.ClickException(f"no scanned entry '{entry_name}' in suite {suite}")
    crashes, ran = [], 0
    for index in range(1, processes + 1):
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.scan_stress_process", suite, entry_name,
             str(steps), "unguarded" if unguarded else "guarded"],
            capture_output=True, text=True)
        done = [line for line in proc.stdout.splitlines() if line.startswith("step ")]
        ran += len(done)
        outcome = "ok" if proc.returncode == 0 else _signal_name(proc.returncode)
        if proc.returncode != 0:
            crashes.append(outcome)
        click.echo(f"process {index}/{processes}: {len(done)} steps, {outcome}, "
                   f"{time.perf_counter() - start:.0f} s", err=True)
    guard = "without the backward's wait" if unguarded else "with the backward's wait"
    click.echo(f"{entry_name} {guard}: {ran} scanned steps in {processes} processes, "
               f"{len(crashes)} crashed" + (f" ({', '.join(crashes)})" if crashes else ""))
    if crashes:
        sys.exit(1)


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


if __name__ == "__main__":
    main()
