"""A stand-in for benchmarks.worker in the harness's tests, run as its own process as the
real one is: the entry's name says what it does. `ok` prints a record; `crash-once` kills
itself with SIGSEGV on its first run only (a marker file in $ZOO_TEST_BENCH_MARKERS
remembers); `crash-always` on every run; `error` exits 1 with an error line."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def record(entry: dict, steps: int) -> dict:
    """What the real worker prints, with made-up measurements."""
    return {"step_times_s": [0.5] * steps, "host_times_s": [0.1] * steps, "warmup_s": 2.0,
            "compile_s": 1.5, "compiles_warmup": 2, "compiles_timed": 0,
            "peak_memory_bytes": None, "flops_per_step": 1e9, "items_per_step": 2048,
            "throughput_unit": "tokens", "parameters": 1000, "devices": 1, "chips": 1,
            "bf16": False}


def crash() -> None:
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGSEGV)


def main(argv: list[str]) -> None:
    job = json.loads(argv[0])
    name = job["entry"]["name"]
    print(f"first line of {name}'s log", file=sys.stderr)
    print("\n".join(f"progress line {i}" for i in range(50)), file=sys.stderr)
    if name == "crash-once":
        marker = Path(os.environ["ZOO_TEST_BENCH_MARKERS"]) / name
        if not marker.exists():
            marker.touch()
            crash()
    if name == "crash-always":
        crash()
    if name == "error":
        sys.exit("Error: the planted failure")
    print(json.dumps(record(job["entry"], job["steps"])))


if __name__ == "__main__":
    main(sys.argv[1:])
