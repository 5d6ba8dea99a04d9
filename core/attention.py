"""Causal softmax attention: the one entry point model families call; which kernel runs is
the backend's choice. The xla backend's program is the plain product below, which XLA
fuses (a family picks Pallas flash attention on a TPU itself, for its sharding); the
dtensor backend turns on torch's fused kernels (`scaled_dot_product_attention`: flash
kernels on GPUs, TorchTPU's fused kernel on TPUs; with packed documents, SDPA with their
block mask, which torch runs with its memory-efficient kernel). Off any backend (eager CPU, the FLOP
counter, parity tests) it is the plain product too."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_fused_kernels = False


def use_fused_kernels() -> None:
    """From now on in this process, attention runs torch's SDPA (the dtensor backend)."""
    global _fused_kernels
    _fused_kernels = True


def causal_attention(q, k, v, segment_ids=None, window=None):
    """[batch, heads, seq, head_dim] queries, keys and values -> the attended values.

    `segment_ids` [batch, seq] keeps packed documents apart: a position attends only to
    earlier positions of its own segment (padding is a segment of its own, so no row of the
    mask is empty). `window` (an int tensor, data so that a scan's layers may differ: 0
    for none) keeps each query to its last `window` keys, itself included (sliding-window
    attention, Gemma's local layers); the masked keys are still computed."""
    if _fused_kernels:
        if segment_ids is None and window is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed(segment_ids, q, window))
    return plain_causal_attention(q, k, v, segment_ids, window)


def allowed(segment_ids, q, window=None) -> torch.Tensor:
    """[batch or 1, 1, seq, seq] bool: where a query may attend to a key (causal, within
    its segment when `segment_ids` is given, within its window when `window` > 0)."""
    seq = q.shape[-2]
    mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
    if window is not None:
        positions = torch.arange(seq, device=q.device)
        distance = positions[:, None] - positions[None, :]
        mask = mask & ((distance < window) | (window <= 0))
    mask = mask[None, None]
    if segment_ids is None:
        return mask
    return mask & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])


def plain_causal_attention(q, k, v, segment_ids=None, window=None):
    """Softmax attention with a causal (and segment) mask; the softmax in fp32 for stability.

    The mask is applied with `where` and a finite floor: `masked_fill` gave wrong gradients
    under scan with min-cut rematerialisation (torch_xla 2.9). The values are weighed by the
    unnormalised exponentials and divided by their sum after (as flash kernels and MaxText's
    dot-product attention do): normalising the [seq, seq] probabilities instead made libtpu
    broadcast each row's max and sum as reduce-windows over the whole row, forward and
    backward, and hold more [seq, seq] fp32 buffers: deepseek3-lite's temporaries on v5p-64
    went from 16.10 to 9.68 GiB a chip (docs/results/plan-compare-deepseek3-lite-v5p-64.md).
    """
    # einsum, not @: `@` merges batch and heads, and libtpu then gathers tensor-split heads.
    # The scores stay in the inputs' dtype (as in transformers' eager attention and MaxText):
    # a [seq, seq] tensor a TPU keeps in HBM is then bf16, half the bytes of fp32.
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * (1 / math.sqrt(q.shape[-1]))
    scores = torch.where(allowed(segment_ids, q, window), scores, torch.full_like(scores, -1e30))
    # the max only keeps exp in range and cancels out: detached, as in flash kernels, so the
    # backward holds no tie mask and no int64 tie count over [seq, seq]
    weights = torch.exp(scores.float() - scores.amax(-1, keepdim=True).detach().float())
    out = torch.einsum("bhqk,bhkd->bhqd", weights.to(v.dtype), v)
    return (out.float() / weights.sum(-1, keepdim=True)).to(v.dtype)


def attention_at_positions(q, k, v, q_pos, k_pos, window=None):
    """Attention of queries at given positions over a cache of keys at given positions (a
    sampler's decode step): q [batch, heads, queries, head_dim]; k, v [batch, keys,
    kv_heads, head_dim] as a cache stores them (v's head_dim may differ: MLA's); q_pos
    [batch, queries], k_pos [batch, keys] (-1: an empty column). A key is seen by a query at
    or after its position, within `window` (> 0) of it. Grouped-query heads read their shared
    key head by a grouped einsum, not a copy of the cache per head; the softmax is
    `plain_causal_attention`'s (finite floor, detached max, divide after), so a query that
    sees no key gives no NaN."""
    batch, heads, queries, head_dim = q.shape
    kv_heads = k.shape[2]
    grouped = q.view(batch, kv_heads, heads // kv_heads, queries, head_dim)
    scores = torch.einsum("bngqd,bknd->bngqk", grouped, k) * (1 / math.sqrt(head_dim))
    distance = q_pos[:, :, None] - k_pos[:, None, :]
    seen = (k_pos[:, None, :] >= 0) & (distance >= 0)
    if window is not None:
        seen = seen & ((distance < window) | (window <= 0))
    scores = torch.where(seen[:, None, None], scores, torch.full_like(scores, -1e30))
    weights = torch.exp(scores.float() - scores.amax(-1, keepdim=True).detach().float())
    out = torch.einsum("bngqk,bknd->bngqd", weights.to(v.dtype), v)
    out = (out.float() / weights.sum(-1, keepdim=True)).to(v.dtype)
    return out.reshape(batch, heads, queries, v.shape[-1])
