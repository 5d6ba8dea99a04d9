"""Rotary position embeddings: the inverse frequencies (with Llama 3.1's scaling), the
cos/sin tables of given positions, and their application by rotating halves."""

from __future__ import annotations

import math

import torch

from zoo.common.decoder_config import DecoderConfig


def rope_inverse_frequencies(config: DecoderConfig) -> torch.Tensor:
    dim = config.dim_per_head
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    # Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, a smooth ramp between.
    low_wavelen = scaling.original_max_position_embeddings / scaling.low_freq_factor
    high_wavelen = scaling.original_max_position_embeddings / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (scaling.original_max_position_embeddings / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotary_tables(input_ids, inv_freq, dtype, positions=None) -> tuple[torch.Tensor, ...]:
    """cos and sin of every position's rotary angles at `inv_freq`: [seq, head_dim] for
    positions 0, 1, ...; [batch, 1, seq, head_dim] (one per head) for given `positions`."""
    if positions is None:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
    freqs = positions.float()[..., None] * inv_freq
    angles = torch.cat((freqs, freqs), dim=-1)
    if angles.dim() == 3:
        angles = angles[:, None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin
