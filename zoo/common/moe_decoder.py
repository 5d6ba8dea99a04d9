"""The mixture-of-experts decoder: the decoder stack (decoder.py) with each layer's MLP a
routed block (moe.py). `forward(input_ids) -> logits` like every decoder here;
`forward_with_router` (and `hidden_states_with_router`, before the LM head) also returns
what the training loss and the logs need from routing (router_stats.py)."""

from __future__ import annotations

import torch
from torch import nn

from zoo.common.decoder import DecoderForCausalLM, DecoderLayer, DecoderModel
from zoo.common.moe import SparseMoeBlock
from zoo.common.router_stats import RouterStats, router_stats


class MoeDecoderLayer(DecoderLayer):
    mlp_cls: type[nn.Module] = SparseMoeBlock

    def forward(self, x, cos, sin, segment_ids=None):
        """(hidden, router statistics): the stack returns the statistics of every layer."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, segment_ids)
        moe, stats = self.mlp(self.post_attention_layernorm(x))
        return x + moe, stats


class MoeDecoderModel(DecoderModel):
    layer_cls: type[nn.Module] = MoeDecoderLayer

    def forward(self, input_ids, segment_ids=None, positions=None):
        """(final hidden states, router statistics of every layer [layers, 2E + 1])."""
        hidden = self.embed(input_ids)
        hidden, stats = self.layers(hidden, *self.layer_extras(input_ids, hidden.dtype,
                                                               segment_ids, positions))
        return self.norm(hidden), stats


class MoeForCausalLM(DecoderForCausalLM):
    """The causal LM (LM head, weight init) around the mixture-of-experts decoder."""

    model_cls: type[nn.Module] = MoeDecoderModel

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
        return hidden, router_stats(stats, input_ids.numel(), self.config)
