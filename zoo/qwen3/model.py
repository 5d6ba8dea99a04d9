"""Qwen3 (dense): Llama's decoder (zoo/llama/model.py) whose queries and keys are RMS-normed
per head before the rotary embedding (`q_norm`, `k_norm`: [head_dim] each), with Qwen3's
parameter names, equal to transformers' `Qwen3ForCausalLM`."""

from __future__ import annotations

from zoo.llama.model import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
    LlamaModel,
    LlamaRMSNorm,
)
from zoo.qwen3.config import Qwen3Config


class Qwen3Attention(LlamaAttention):
    def __init__(self, config: Qwen3Config):
        super().__init__(config)
        self.q_norm = LlamaRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = LlamaRMSNorm(self.head_dim, config.rms_norm_eps)

    def heads_qkv(self, x):
        q, k, v = super().heads_qkv(x)
        return self.q_norm(q), self.k_norm(k), v


class Qwen3DecoderLayer(LlamaDecoderLayer):
    attention_cls = Qwen3Attention


class Qwen3Model(LlamaModel):
    def __init__(self, config: Qwen3Config):
        super().__init__(config, Qwen3DecoderLayer)


class Qwen3ForCausalLM(LlamaForCausalLM):
    model_cls = Qwen3Model
