"""This host's CPU matmul peak for a training run's MFU, measured once and remembered.

A quick measurement costs every `zoo train` on XLA:CPU about 2 s, and the host does not
change between runs; so it is kept in zoo's cache ($ZOO_CACHE/cpu-peak.json), per host,
CPU count, dtype and virtual device count, for a day. `zoo bench` measures its own, longer
calibration every time (benchmarks/calibration.py)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path

from core.backends.xla.peak import calibrate_cpu_peak
from core.cache import cache_home

MAX_AGE_S = 24 * 3600
CACHE_FILE = "cpu-peak.json"


def remembered_cpu_peak(dtype_name: str, devices: int) -> tuple[float, float]:
    """(FLOP/s, when it was measured as a Unix time): the remembered measurement when one
    younger than MAX_AGE_S exists for this host, else a fresh one, remembered."""
    key = f"{socket.gethostname()} cpus={len(os.sched_getaffinity(0))} {dtype_name} x{devices}"
    path = cache_home() / CACHE_FILE
    known = _read(path)
    entry = known.get(key)
    if isinstance(entry, dict) and time.time() - entry.get("measured_at", 0) < MAX_AGE_S:
        return float(entry["flops"]), float(entry["measured_at"])
    flops, now = calibrate_cpu_peak(dtype_name, windows=2, seconds=0.4).flops, time.time()
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
