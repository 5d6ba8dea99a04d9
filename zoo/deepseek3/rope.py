"""DeepSeek's rotary frequencies: YaRN past the pretraining context (what the released
sizes use), written out so that building a model (`zoo models`, the planner, on the meta
device) needs no transformers; tests/multidevice/test_deepseek3_presets.py checks it
against transformers' (a YaRN parity config)."""

from __future__ import annotations

import math

import torch

from zoo.deepseek3.config import DeepseekV3Config


def rope_frequencies(config: DeepseekV3Config) -> tuple[torch.Tensor, float]:
    """The rotary part's inverse frequencies, and the factor on cos and sin (1 without YaRN;
    with it, mscale's over mscale_all_dim's)."""
    dim, base, factor = config.qk_rope_head_dim, config.rope_theta, config.rope_factor
    extrapolated = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
    if factor == 1.0:
        return extrapolated, 1.0
    low, high = (_dimension(rotations, dim, base, config.rope_original_max_position_embeddings)
                 for rotations in (config.rope_beta_fast, config.rope_beta_slow))
    low, high = max(math.floor(low), 0), min(math.ceil(high), dim - 1)
    ramp = ((torch.arange(dim // 2, dtype=torch.float) - low) / max(high - low, 0.001)).clamp(0, 1)
    keep = 1 - ramp  # 1: the high frequencies, kept; 0: the low ones, interpolated
    inv_freq = extrapolated / factor * (1 - keep) + extrapolated * keep
    if config.rope_mscale and config.rope_mscale_all_dim:
        return inv_freq, _mscale(factor, config.rope_mscale) / _mscale(factor,
                                                                      config.rope_mscale_all_dim)
    return inv_freq, _mscale(factor)


def _dimension(rotations: float, dim: int, base: float, positions: int) -> float:
    """The rotary dimension that turns `rotations` times over `positions`."""
    return dim * math.log(positions / (rotations * 2 * math.pi)) / (2 * math.log(base))


def _mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0
