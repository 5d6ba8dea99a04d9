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


def calibrate_cpu_peak(
    dtype_name: str = "float32", size: int = 1024, seconds: float = 0.5
) -> float:
    """Measured matmul FLOP/s of this host's CPU (torch, all threads): the CPU's 'peak'."""
    import torch

    dtype = getattr(torch, dtype_name)
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    a @ b  # warm up
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        runs += 1
    return 2.0 * size**3 * runs / (time.perf_counter() - start)
