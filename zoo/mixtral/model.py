"""A Mixtral-style decoder: Llama's attention, norms and rotary embeddings (zoo/llama) with
the MLP replaced by a routed mixture of experts (moe.py). Parameter names equal
transformers' `MixtralForCausalLM`. `forward(input_ids) -> logits` like every decoder here;
`forward_with_router` (and `hidden_states_with_router`, before the LM head) also returns
what the training loss and the logs need from routing.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from zoo.llama.model import LlamaAttention, LlamaForCausalLM, LlamaModel, LlamaRMSNorm
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
    attention_cls: type[LlamaAttention] = LlamaAttention  # a family's own (qwen3moe's)

    def __init__(self, config: MixtralConfig):
        super().__init__()
        self.self_attn = self.attention_cls(config)
        self.mlp = MixtralSparseMoeBlock(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, cos, sin, segment_ids=None):
        """(hidden, router statistics): the stack returns the statistics of every layer."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, segment_ids)
        moe, stats = self.mlp(self.post_attention_layernorm(x))
        return x + moe, stats


class MixtralModel(LlamaModel):
    layer_cls: type[MixtralDecoderLayer] = MixtralDecoderLayer

    def __init__(self, config: MixtralConfig):
        super().__init__(config, self.layer_cls)

    def forward(self, input_ids, segment_ids=None, positions=None):
        """(final hidden states, router statistics of every layer [layers, 2E + 1])."""
        hidden = self.embed(input_ids)
        hidden, stats = self.layers(hidden, *self.layer_extras(input_ids, hidden.dtype,
                                                               segment_ids, positions))
        return self.norm(hidden), stats


class MixtralForCausalLM(LlamaForCausalLM):
    """Llama's causal LM (LM head, weight init) around the mixture-of-experts decoder."""

    model_cls = MixtralModel

    def forward(self, input_ids, segment_ids=None, positions=None):
        return self.forward_with_router(input_ids, segment_ids, positions)[0]

    def forward_with_router(self, input_ids, segment_ids=None,
                            positions=None) -> tuple[torch.Tensor, RouterStats]:
        hidden, router = self.hidden_states_with_router(input_ids, segment_ids, positions)
        return self.logits(hidden), router

    def hidden_states(self, input_ids, segment_ids=None, positions=None):
        return self.hidden_states_with_router(input_ids, segment_ids, positions)[0]

    def hidden_states_with_router(self, input_ids, segment_ids=None,
                                  positions=None) -> tuple[torch.Tensor, RouterStats]:
        hidden, stats = self.model(input_ids, segment_ids, positions)
        experts = self.config.num_local_experts
        tokens_per_expert, router_probs, kept = stats.split((experts, experts, 1), dim=-1)
        tokens = input_ids.numel()
        load = tokens_per_expert.sum(0)
        assignments = tokens * self.config.num_experts_per_tok * tokens_per_expert.shape[0]
        return hidden, RouterStats(
            aux_loss=load_balancing_loss(tokens_per_expert, router_probs, tokens),
            balance=load.max() / load.mean(),
            dropped_fraction=1 - kept.sum() / assignments,
        )
