"""The CPU peak that `zoo bench --mfu` divides by, measured so that it holds still.

This host shares its cores: a neighbour's load slowed 1 s matmul windows by up to 40% for
several seconds at a time, so a single measurement per run swung the peak by 18% between
runs. The harness therefore measures right before every entry (the best of 5 windows each:
load only ever slows a window down) and takes the run's peak as the median of those: one
disturbed or lucky entry does not move it. Every measurement and their spread go into
results.json, where a disturbed run shows itself.
"""

from __future__ import annotations

import statistics

from benchmarks.suite import Entry
from core import topology
from core.backends.xla.peak import calibrate_cpu_peak
from core.flops import PeakMeasurement, spread

METHOD = (
    "host CPU, XLA graph of 4 chained 2048 x 2048 matmuls, best of 5 x 1 s windows after an "
    "untimed one, measured right before each entry; peak = the median of those; spread = "
    "(max - min) / median"
)


def peak_dtype(entry: Entry) -> str | None:
    """The dtype of the CPU peak an entry's MFU divides by; None on a TPU (catalog peak)."""
    topo = topology.parse(entry.tpu)
    if topo.is_tpu:
        return None
    return "bfloat16" if entry.run().config.runs_in_bf16(topo) else "float32"


class RunPeaks:
    """Every peak measurement of one benchmark run."""

    def __init__(self):
        self.measurements: list[PeakMeasurement] = []

    def measure(self, dtype: str) -> PeakMeasurement:
        self.measurements.append(calibrate_cpu_peak(dtype))
        return self.measurements[-1]

    def peak(self, dtype: str) -> float:
        """The run's peak: the median of its per-entry measurements."""
        return statistics.median(m.flops for m in self.measurements if m.dtype == dtype)

    def summary(self) -> dict | None:
        """What results.json records per dtype: the peak, and how far apart the per-entry
        measurements lay (the run-to-run stability shows there)."""
        if not self.measurements:
            return None
        summary = {"method": METHOD}
        for dtype in sorted({m.dtype for m in self.measurements}):
            bests = [m.flops for m in self.measurements if m.dtype == dtype]
            summary[dtype] = {
                "peak_flops": self.peak(dtype),
                "per_entry_min_flops": min(bests),
                "per_entry_max_flops": max(bests),
                "spread": spread(bests),
                "measurements": len(bests),
            }
        return summary
