"""Model FLOPs and peak FLOP/s for an honest MFU.

MFU = model FLOPs per step / (step time x devices x peak FLOP/s per device). Model FLOPs are
3 x the forward matmul FLOPs (weights, attention scores and values, LM head); attention is
counted causal (half the score matrix, MaxText's convention) unless `causal=False`.
"""

from __future__ import annotations

import dataclasses
import statistics

from core.decoder_shape import DecoderShape


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
