"""0/1 masks made by comparison where torch would scatter: routing's one-hot masks and the
router's picked scores, which libtpu's cost analysis charged thousands of times their bytes
as scatters."""

from __future__ import annotations

import torch


def one_hot(ids: torch.Tensor, classes: int, dtype: torch.dtype) -> torch.Tensor:
    """[..., classes] 0/1 masks of `ids`, made by comparison. Not `F.one_hot`: torch_xla lowers
    it to an int64 scatter, which a TPU emulates with pairs of 32-bit words and libtpu's cost
    analysis charges ~4000x its bytes (275 GB per mask on deepseek3-lite, 64 x 4096
    tokens on v5p-64: docs/results/plan-compare-deepseek3-lite-v5p-64.md)."""
    return (ids.unsqueeze(-1) == torch.arange(classes, device=ids.device)).to(dtype)


def picked(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """`values.gather(-1, ids)` (the router's score of each chosen expert), made with a
    comparison mask so that its gradient is a product, not a scatter: the backward of
    `gather` and of `topk`'s values scatters into [..., experts], and libtpu's cost analysis
    charged each such scatter ~12,000x its bytes (138 GB per routed layer on deepseek3-lite,
    docs/results/plan-compare-deepseek3-lite-v5p-64.md)."""
    return (one_hot(ids, values.shape[-1], values.dtype) * values.unsqueeze(-2)).sum(-1)
