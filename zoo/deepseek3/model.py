"""DeepSeek-V3: multi-head latent attention (attention.py) in every layer; the first
`first_k_dense_replace` layers' MLP a dense SwiGLU, the others DeepSeekMoE (moe.py). The
mixture-of-experts model around them (zoo/common/moe_decoder.py: router statistics, the
load-balancing loss term, dispatch); parameter names equal transformers' `DeepseekV3ForCausalLM`.

The dense layers differ from the routed ones: under scan they run unrolled before the scan
of the routed layers (core/remat.py LayerStack's alike tail)."""

from __future__ import annotations

import torch
from torch import nn

from core.remat import LayerStack
from zoo.common.embedding import TokenEmbedding
from zoo.common.feed_forward import SwiGLU
from zoo.common.moe_decoder import MoeDecoderModel, MoeForCausalLM
from zoo.common.norms import RMSNorm
from zoo.deepseek3.attention import MultiHeadLatentAttention
from zoo.deepseek3.config import DeepseekV3Config
from zoo.deepseek3.moe import DeepseekMoE, SigmoidGroupRouter
from zoo.deepseek3.rope import rope_frequencies


class DeepseekV3DecoderLayer(nn.Module):
    """forward(x, cos, sin[, segment_ids]) -> (x, router statistics [2E + 1]): a dense
    layer's are zeros, so every layer returns the same and the model keeps the routed
    layers' rows."""

    def __init__(self, config: DeepseekV3Config, routed: bool):
        super().__init__()
        self.self_attn = MultiHeadLatentAttention(config)
        self.mlp = DeepseekMoE(config) if routed else SwiGLU(
            config, config.dense_intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.stats_width = 2 * config.num_local_experts + 1

    def forward(self, x, cos, sin, segment_ids=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, segment_ids)
        out = self.mlp(self.post_attention_layernorm(x))
        if isinstance(out, tuple):
            return x + out[0], out[1]
        return x + out, x.new_zeros(self.stats_width, dtype=torch.float32)


class DeepseekV3Model(MoeDecoderModel):
    def __init__(self, config: DeepseekV3Config):
        nn.Module.__init__(self)  # its own layers and rotary frequencies, the MoE forward
        self.first_routed, self.experts = config.first_k_dense_replace, config.num_local_experts
        self.embed_tokens = TokenEmbedding(config.vocab_size, config.hidden_size)
        self.layers = LayerStack([DeepseekV3DecoderLayer(config, i >= self.first_routed)
                                  for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        inv_freq, self.rope_attention_factor = rope_frequencies(config)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, input_ids, segment_ids=None, positions=None):
        hidden, stats = super().forward(input_ids, segment_ids, positions)
        routed = stats[self.first_routed:]
        self._count_expert_load(routed[:, :self.experts])  # tokens per expert come first
        return hidden, routed

    def _count_expert_load(self, tokens: torch.Tensor) -> None:
        """Give each router its layers' rows of `tokens` [routed layers, E]: counted here,
        from what the layer stack returns, because a scanned layer cannot write a buffer.
        (A layer recomputed in backward is counted once.)"""
        rows = 0
        for router in self.layers.modules():
            if isinstance(router, SigmoidGroupRouter):
                layers = router.expert_load.numel() // self.experts  # [E], or [layers, E]
                router.count(tokens[rows:rows + layers].reshape_as(router.expert_load))
                rows += layers

    def rotary_tables(self, input_ids, dtype, positions=None, inv_freq=None):
        cos, sin = super().rotary_tables(input_ids, dtype, positions, inv_freq)
        if self.rope_attention_factor == 1.0:
            return cos, sin
        return cos * self.rope_attention_factor, sin * self.rope_attention_factor


class DeepseekV3ForCausalLM(MoeForCausalLM):
    model_cls = DeepseekV3Model

