"""Model FLOPs and peak FLOP/s for an honest MFU.

MFU = model FLOPs per step / (step time x devices x peak FLOP/s per device). Model FLOPs are
3 x the forward matmul FLOPs (weights, attention scores and values, LM head); attention is
counted causal (half the score matrix, MaxText's convention) unless `causal=False`.
"""

from __future__ import annotations

import time

from zoo.core.decoder_shape import DecoderShape


def decoder_lm_forward_flops_per_token(shape: DecoderShape, seq_len: int,
                                       causal: bool = True) -> float:
    """Forward matmul FLOPs per token of a decoder LM (2 FLOPs per multiply-add)."""
    s, head_dim = shape, shape.dim_per_head
    attn_proj = s.hidden * head_dim * (2 * s.heads + 2 * s.kv)  # q, o and k, v projections
    mlp = s.hidden * s.mlp_width * (3 if s.gated_mlp else 2)
    weights = s.layers * (attn_proj + mlp) + s.hidden * s.vocab  # + LM head
    attention = s.layers * 2 * seq_len * s.heads * head_dim  # scores and values
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
