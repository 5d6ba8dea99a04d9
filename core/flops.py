"""Model FLOPs and peak FLOP/s for an honest MFU.

MFU = model FLOPs per step / (step time x devices x peak FLOP/s per device). Model FLOPs are
3 x the forward matmul FLOPs (weights, attention scores and values, LM head); attention is
counted causal (half the score matrix, MaxText's convention) unless `causal=False`.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from zoo.core.decoder_shape import DecoderShape


def decoder_lm_forward_flops_per_token(shape: DecoderShape, seq_len: int,
                                       causal: bool = True) -> float:
    """Forward matmul FLOPs per token of a decoder LM (2 FLOPs per multiply-add)."""
    s, head_dim = shape, shape.dim_per_head
    attn_proj = s.hidden * head_dim * (2 * s.heads + 2 * s.kv)  # q, o and k, v projections
    mlp = s.hidden * s.mlp_width * (3 if s.gated_mlp else 2) * s.experts_per_token
    mlp += s.hidden * s.router_experts
    weights = s.layers * (attn_proj + mlp) + s.hidden * s.vocab  # + LM head
    attention = s.layers * 2 * seq_len * s.heads * head_dim  # scores and values
    if causal:
        attention /= 2
    return 2.0 * (weights + attention)


def train_flops(forward_flops: float) -> float:
    """Backward costs twice the forward: 3x overall."""
    return 3.0 * forward_flops


@dataclasses.dataclass(frozen=True)
class PeakMeasurement:
    """A measured CPU peak: the FLOP/s of several timed windows of one matmul. The peak is
    their best (other load only ever slows a window down); the windows are kept so the
    measurement's own spread can be reported next to it."""

    dtype: str
    windows: tuple[float, ...]

    @property
    def flops(self) -> float:
        return max(self.windows)

    @property
    def spread(self) -> float:
        return spread(self.windows)


def spread(values) -> float:
    """(max - min) / median: how far repeated measurements of one quantity lie apart."""
    return (max(values) - min(values)) / statistics.median(values)


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
    import numpy as np
    import torch
    import torch_xla
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

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
    import torch_xla
    import torch_xla.core.xla_model as xm

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
