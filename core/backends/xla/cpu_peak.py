"""This host's CPU matmul peak for a training run's MFU, measured once and remembered.

A quick measurement costs every `zoo train` on XLA:CPU about 2 s, and the host does not
change between runs; so it is kept in zoo's cache ($ZOO_CACHE/cpu-peak.json), per host,
CPU count, dtype and virtual device count, for a day. But a peak measured while other work
loaded the host is too low, and a day of quiet runs then overstates MFU (115 GFLOP/s so
measured made 35% read 66%); so a run re-checks it with one short window (at most every
RECHECK_EVERY_S) and measures again when that beats it by more than RECHECK_MARGIN.
`zoo bench` measures its own, longer calibration every time (benchmarks/calibration.py)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path

from core.backends.xla.peak import calibrate_cpu_peak, quick_cpu_peak
from core.cache import cache_home

MAX_AGE_S = 24 * 3600
# Window-to-window noise is a few percent; a loaded host's measurement is tens of percent low
RECHECK_MARGIN = 0.10
# runs minutes apart (a sweep, a test suite) share one re-check
RECHECK_EVERY_S = 600
CACHE_FILE = "cpu-peak.json"


def remembered_cpu_peak(dtype_name: str, devices: int) -> tuple[float, float]:
    """(FLOP/s, when it was measured as a Unix time): the remembered measurement when one
    younger than MAX_AGE_S exists for this host and a quick re-check (unless one ran in the
    last RECHECK_EVERY_S) does not beat it by more than RECHECK_MARGIN, else a fresh one,
    remembered."""
    key = f"{socket.gethostname()} cpus={len(os.sched_getaffinity(0))} {dtype_name} x{devices}"
    path = cache_home() / CACHE_FILE
    known = _read(path)
    entry, check = known.get(key), 0.0
    if isinstance(entry, dict) and time.time() - entry.get("measured_at", 0) < MAX_AGE_S:
        remembered = float(entry["flops"]), float(entry["measured_at"])
        if time.time() - entry.get("checked_at", entry["measured_at"]) < RECHECK_EVERY_S:
            return remembered
        check = quick_cpu_peak(dtype_name)
        if check <= entry["flops"] * (1 + RECHECK_MARGIN):
            _write(path, {**known, key: {**entry, "checked_at": time.time()}})
            return remembered
    # the check's window counts too: the peak is the best window, and load only slows one
    flops = max(calibrate_cpu_peak(dtype_name, windows=2, seconds=0.4).flops, check)
    now = time.time()
    _write(path, {**known, key: {"flops": flops, "measured_at": now}})
    return flops, now


def _read(path) -> dict:
    """The remembered measurements; none when the file is missing or damaged (it is then
    measured again and rewritten)."""
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _write(path, known: dict) -> None:
    """Whole-file replace, so a concurrent run reads the old or the new file, never half;
    a cache that cannot be written only means measuring again next time."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp",
                                         delete=False) as tmp:
            json.dump(known, tmp)
        os.replace(tmp.name, path)
    except OSError:
        if tmp is not None:
            Path(tmp.name).unlink(missing_ok=True)
