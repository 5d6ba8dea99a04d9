"""A Mixtral-style decoder: Llama's attention, norms and rotary embeddings (zoo/llama) with
the MLP replaced by a routed mixture of experts (moe.py). Parameter names equal
transformers' `MixtralForCausalLM`. `forward(input_ids) -> logits` like every decoder here;
`forward_with_router` also returns what the training loss and the logs need from routing.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from zoo.core.remat import LayerStack
from zoo.llama.model import LlamaAttention, LlamaRMSNorm, rope_inverse_frequencies
from zoo.mixtral.config import MixtralConfig
from zoo.mixtral.moe import MixtralSparseMoeBlock, load_balancing_loss


@dataclasses.dataclass
class RouterStats:
    """Routing over the whole forward: the load-balancing loss (differentiable), expert load
    balance (the busiest expert's share of assignments over the mean share: 1.0 is even), and
    the fraction of top-k assignments dropped by capacity dispatch."""

    aux_loss: torch.Tensor
    balance: torch.Tensor
    dropped_fraction: torch.Tensor


class MixtralDecoderLayer(nn.Module):
    def __init__(self, config: MixtralConfig):
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = MixtralSparseMoeBlock(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, cos, sin):
        """(hidden, router statistics): the stack returns the statistics of every layer."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        moe, stats = self.mlp(self.post_attention_layernorm(x))
        return x + moe, stats


class MixtralModel(nn.Module):
    def __init__(self, config: MixtralConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = LayerStack(
            [MixtralDecoderLayer(config) for _ in range(config.num_hidden_layers)]
        )
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.register_buffer("inv_freq", rope_inverse_frequencies(config), persistent=False)

    def forward(self, input_ids):
        hidden = self.embed_tokens(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device, dtype=torch.float)
        freqs = positions[:, None] * self.inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos().to(hidden.dtype), angles.sin().to(hidden.dtype)
        hidden, stats = self.layers(hidden, cos, sin)
        return self.norm(hidden), stats


class MixtralForCausalLM(nn.Module):
    def __init__(self, config: MixtralConfig):
        super().__init__()
        self.config = config
        self.model = MixtralModel(config)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids):
        return self.forward_with_router(input_ids)[0]

    def forward_with_router(self, input_ids) -> tuple[torch.Tensor, RouterStats]:
        hidden, stats = self.model(input_ids)  # [layers, 2E + 1]
        experts = self.config.num_local_experts
        tokens_per_expert, router_probs, kept = stats.split((experts, experts, 1), dim=-1)
        if self.config.tie_word_embeddings:
            logits = hidden @ self.model.embed_tokens.weight.t()
        else:
            logits = self.lm_head(hidden)
        tokens = input_ids.numel()
        load = tokens_per_expert.sum(0)
        assignments = tokens * self.config.num_experts_per_tok * tokens_per_expert.shape[0]
        return logits, RouterStats(
            aux_loss=load_balancing_loss(tokens_per_expert, router_probs, tokens),
            balance=load.max() / load.mean(),
            dropped_fraction=1 - kept.sum() / assignments,
        )

    def init_weights(self, seed: int = 0) -> None:
        """Normal(0, initializer_range) for matrices and experts, ones for norms, seeded."""
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("norm.weight"):
                    param.fill_(1.0)
                else:
                    values = torch.randn(param.shape, generator=generator)
                    param.copy_(values * self.config.initializer_range)
