"""A readable ViT image classifier with Hugging Face parameter names.

Conv patch embedding, class token, learned position embeddings, pre-LayerNorm blocks (MHA
with biases, exact-GELU MLP), final LayerNorm, a linear classifier on the class token.
Parameter names equal `transformers.ViTForImageClassification`'s (transformers 5 layout), so
its safetensors load directly. No sharding calls and no host syncs in forward.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from core.remat import LayerStack
from zoo.vit.config import ViTConfig


class ViTPatchEmbeddings(nn.Module):
    """Each non-overlapping patch times one weight matrix. The weights keep HF's Conv2d
    layout ([hidden, channels, p, p]), but the product is a plain matmul over the patches,
    which is what a stride-p convolution computes: the TPU compiler takes minutes over the
    strided convolution's gradient at 224 px (vit-b16 on v6e-8: no program in 15 minutes)
    and seconds over the matmul."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.patch_size = config.patch_size
        self.projection = nn.Conv2d(
            config.num_channels, config.hidden_size, config.patch_size, stride=config.patch_size
        )

    def forward(self, pixel_values):
        batch, channels, height, width = pixel_values.shape
        p = self.patch_size
        patches = (pixel_values.reshape(batch, channels, height // p, p, width // p, p)
                   .permute(0, 2, 4, 1, 3, 5)  # [B, rows, cols, C, p, p]
                   .reshape(batch, (height // p) * (width // p), channels * p * p))
        return nn.functional.linear(patches, self.projection.weight.flatten(1),
                                    self.projection.bias)  # [B, patches, H]


class ViTEmbeddings(nn.Module):
    def __init__(self, config: ViTConfig):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.position_embeddings = nn.Parameter(
            torch.zeros(1, config.num_patches + 1, config.hidden_size)
        )
        self.patch_embeddings = ViTPatchEmbeddings(config)

    def forward(self, pixel_values):
        patches = self.patch_embeddings(pixel_values)
        cls = self.cls_token.expand(patches.shape[0], -1, -1)
        return torch.cat((cls, patches), dim=1) + self.position_embeddings


class ViTAttention(nn.Module):
    def __init__(self, config: ViTConfig):
        super().__init__()
        hidden = config.hidden_size
        self.heads = config.num_attention_heads
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.o_proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        batch, tokens, hidden = x.shape

        def heads(t):
            return t.view(batch, tokens, self.heads, -1).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
        attended = scores.softmax(-1).to(v.dtype) @ v
        return self.o_proj(attended.transpose(1, 2).reshape(batch, tokens, hidden))


class ViTMLP(nn.Module):
    def __init__(self, config: ViTConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class ViTLayer(nn.Module):
    def __init__(self, config: ViTConfig):
        super().__init__()
        self.attention = ViTAttention(config)
        self.mlp = ViTMLP(config)
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x):
        x = x + self.attention(self.layernorm_before(x))
        return x + self.mlp(self.layernorm_after(x))


class ViTModel(nn.Module):
    def __init__(self, config: ViTConfig):
        super().__init__()
        self.embeddings = ViTEmbeddings(config)
        self.layers = LayerStack([ViTLayer(config) for _ in range(config.num_hidden_layers)])
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, pixel_values):
        return self.layernorm(self.layers(self.embeddings(pixel_values)))


class ViTForImageClassification(nn.Module):
    """`forward(pixel_values [B, C, H, W]) -> logits [B, num_labels]`."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.config = config
        self.vit = ViTModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, pixel_values):
        return self.classifier(self.vit(pixel_values)[:, 0])

    def init_weights(self, seed: int = 0) -> None:
        """HF's scheme, seeded: truncated normal(0, initializer_range) for matrices, the
        class token and position embeddings; zero biases; unit LayerNorm weights."""
        generator = torch.Generator().manual_seed(seed)
        std = self.config.initializer_range
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("bias"):
                    param.zero_()
                elif "layernorm" in name:
                    param.fill_(1.0)
                else:
                    values = torch.randn(param.shape, generator=generator).clamp_(-2, 2)
                    param.copy_(values * std)
