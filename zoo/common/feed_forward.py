"""The gated MLP of Llama-style decoders: SwiGLU (gate, up and down projections)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from zoo.common.decoder_config import DecoderConfig


class SwiGLU(nn.Module):
    def __init__(self, config: DecoderConfig, intermediate_size: int | None = None):
        """SwiGLU of `intermediate_size` (default the config's; deepseek3's dense layers and
        shared experts have their own)."""
        super().__init__()
        inner = intermediate_size or config.intermediate_size
        self.gate_proj = nn.Linear(config.hidden_size, inner, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, inner, bias=False)
        self.down_proj = nn.Linear(inner, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
