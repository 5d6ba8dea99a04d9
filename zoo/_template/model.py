"""MyModel: a small pre-LayerNorm decoder LM (GPT-style) -- replace it with your model.

What the runtime needs from a model: plain nn.Modules, no sharding calls and no host syncs in
forward (one XLA graph per step), fixed shapes, and the repeated blocks in a `LayerStack` so
the remat presets can checkpoint or scan them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from core.remat import LayerStack

from .config import MyModelConfig


class MyModelAttention(nn.Module):
    def __init__(self, config: MyModelConfig):
        super().__init__()
        self.heads = config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, x):
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        # einsum, not @: `@` merges batch and heads, and libtpu then gathers tensor-split heads
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k).float() / math.sqrt(q.shape[-1])
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        # `where` with a finite floor rather than masked_fill: correct gradients under scan.
        scores = torch.where(causal, scores, torch.full_like(scores, -1e30))
        attended = torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1).to(v.dtype), v)
        return self.out(attended.transpose(1, 2).reshape(batch, seq, hidden))


class MyModelBlock(nn.Module):
    def __init__(self, config: MyModelConfig):
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.hidden_size)
        self.attn = MyModelAttention(config)
        self.mlp_norm = nn.LayerNorm(config.hidden_size)
        self.up = nn.Linear(config.hidden_size, config.mlp_ratio * config.hidden_size, bias=False)
        self.down = nn.Linear(config.mlp_ratio * config.hidden_size, config.hidden_size, bias=False)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.down(F.gelu(self.up(self.mlp_norm(x))))


class MyModelForCausalLM(nn.Module):
    """`forward(input_ids) -> logits`, the interface zoo.tasks.causal_lm trains."""

    def __init__(self, config: MyModelConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.blocks = LayerStack([MyModelBlock(config) for _ in range(config.num_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.embed(input_ids) + self.positions(positions)
        return self.lm_head(self.norm(self.blocks(hidden)))

    def init_weights(self, seed: int = 0) -> None:
        """Normal(0, initializer_range) matrices, unit norms, zero biases; seeded."""
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in self.named_parameters():
                if "norm" in name:
                    param.fill_(1.0 if name.endswith("weight") else 0.0)
                else:
                    values = torch.randn(param.shape, generator=generator)
                    param.copy_(values * self.config.initializer_range)
