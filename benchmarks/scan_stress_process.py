"""One process of benchmarks/scan_stress.py: a scanned entry's step, run STEPS times with
each step dispatched before the previous one has finished executing, then one wait.

    python -m benchmarks.scan_stress_process SUITE ENTRY STEPS guarded|unguarded

Prints `step N` once step N is traced and dispatched (the parent counts those lines).
"""

from __future__ import annotations

import sys
import tempfile

from benchmarks.suite import load_suite


def main(suite: str, entry_name: str, steps: int, guard: str) -> None:
    if guard == "unguarded":  # the wait torch_xla's scan backward needs, off (see the cause)
        from core.backends.xla import scan_backward

        scan_backward._wait_for_devices = lambda grad: None
    from core.backends.xla.runtime import sync, sync_and_wait
    from core.backends.xla.spmd import shard_batch
    from zoo.app.train import build_engine

    entry = next(e for e in load_suite(suite) if e.name == entry_name)
    with tempfile.TemporaryDirectory() as scratch:
        _, engine = build_engine(entry.run(f"out={scratch}"))
        batch = shard_batch(engine.data.batch(0), engine.mesh)
        for step in range(1, steps + 1):
            engine.train_step(batch)
            sync()  # dispatched; the next step is traced while this one executes
            print(f"step {step}", flush=True)
        sync_and_wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
