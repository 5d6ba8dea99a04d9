"""Model FLOPs and peak FLOP/s for an honest MFU.

MFU = model FLOPs per step / (step time x devices x peak FLOP/s per device). Model FLOPs are
3 x the forward matmul FLOPs (weights, attention scores and values, LM head); attention is
counted causal (half the score matrix, MaxText's convention) unless `causal=False`.
"""

from __future__ import annotations

import time


def decoder_lm_forward_flops_per_token(
    *,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    intermediate: int,
    vocab: int,
    seq_len: int,
    gated_mlp: bool = True,
    causal: bool = True,
) -> float:
    """Forward matmul FLOPs per token of a decoder LM (2 FLOPs per multiply-add)."""
    attn_proj = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, o and k, v projections
    mlp = hidden * intermediate * (3 if gated_mlp else 2)
    weights = layers * (attn_proj + mlp) + hidden * vocab  # + LM head
    attention = layers * 2 * seq_len * heads * head_dim  # scores and values
    if causal:
        attention /= 2
    return 2.0 * (weights + attention)


def train_flops(forward_flops: float) -> float:
    """Backward costs twice the forward: 3x overall."""
    return 3.0 * forward_flops


def calibrate_cpu_peak(dtype_name: str = "float32", sizes=(1024, 2048),
                       seconds: float = 0.4) -> float:
    """Measured matmul FLOP/s of this host's CPU through XLA, the runtime the model runs
    on (XLA:CPU's matmuls beat torch's eager ones here): the CPU's 'peak'. The best of a
    few square sizes, so MFU divides by what the CPU sustains, not by one unlucky size.
    Under SPMD the rows are split over all devices, so the whole runtime shares the work
    (a replicated matmul would do it once per virtual device)."""
    import numpy as np
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    dtype, device = getattr(torch, dtype_name), torch_xla.device()
    devices = xr.global_runtime_device_count()
    best = 0.0
    for size in sizes:
        a = torch.randn(size, size, dtype=dtype).to(device)
        b = torch.randn(size, size, dtype=dtype).to(device)
        if xr.is_spmd():
            xs.mark_sharding(a, xs.Mesh(np.arange(devices), (devices,), ("all",)), ("all", None))

        product = a @ b  # compile once
        torch_xla.sync()
        runs, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            product = a @ b  # kept alive, so sync runs it
            torch_xla.sync()
            xm.wait_device_ops()
            runs += 1
        del product
        best = max(best, 2.0 * size**3 * runs / (time.perf_counter() - start))
    return best
