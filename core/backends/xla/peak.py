"""This host's CPU matmul peak, measured through XLA: what MFU on XLA:CPU is against."""

from __future__ import annotations

import time

import numpy as np
import torch

from core.flops import PeakMeasurement


def calibrate_cpu_peak(dtype_name: str = "float32", size: int = 2048, windows: int = 5,
                       seconds: float = 1.0, chain: int = 4) -> PeakMeasurement:
    """Measured matmul FLOP/s of this host's CPU through XLA, the runtime the model runs
    on (XLA:CPU's matmuls beat torch's eager ones here): the CPU's 'peak'.

    Each run is one graph of `chain` dependent 2048-square matmuls, so dispatch and sync are
    a small part of it; on this shared VM that shape also varied least over time (2.7% window
    to window, against 5.4% for one matmul per graph and 11.6% for a chain of 512-square ones).
    One untimed window first lets thread pools spin up and clocks settle; then `windows` windows
    of `seconds` each. Under SPMD the rows are split over all devices, so the whole runtime
    shares the work (a replicated matmul would do it once per virtual device)."""
    import torch_xla  # torch_xla
    import torch_xla.distributed.spmd as xs  # torch_xla
    import torch_xla.runtime as xr  # torch_xla

    dtype, device = getattr(torch, dtype_name), torch_xla.device()
    a = torch.randn(size, size, dtype=dtype).to(device)
    b = (torch.randn(size, size) / size**0.5).to(dtype).to(device)  # keeps products O(1)
    if xr.is_spmd():
        devices = xr.global_runtime_device_count()
        xs.mark_sharding(a, xs.Mesh(np.arange(devices), (devices,), ("all",)), ("all", None))
    _chains_per_second(a, b, chain, seconds)
    flops = 2.0 * size**3 * chain
    rates = [flops * _chains_per_second(a, b, chain, seconds) for _ in range(windows)]
    return PeakMeasurement(dtype_name, tuple(rates))


def _chains_per_second(a, b, chain: int, seconds: float) -> float:
    """Back-to-back synchronous runs of a @ b @ ... @ b for about `seconds`."""
    import torch_xla  # torch_xla
    import torch_xla.core.xla_model as xm  # torch_xla

    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        product = a
        for _ in range(chain):
            product = product @ b
        torch_xla.sync()  # product is alive, so the sync runs the chain
        xm.wait_device_ops()
        runs += 1
    del product
    return runs / (time.perf_counter() - start)


def quick_cpu_peak(dtype_name: str) -> float:
    """One 0.1 s window of single 2048-square matmuls after a 0.1 s warm-up (0.5-1 s on a
    loaded 2-core VM, where the full measurement took 2.7 s): cheap enough for every
    run to re-check a remembered peak that was measured while other work slowed the host."""
    return calibrate_cpu_peak(dtype_name, windows=1, seconds=0.1, chain=1).flops
