"""Qwen3-MoE: zoo/common's mixture-of-experts decoder (routed experts, router statistics)
with QK-norm attention (per-head query and key norms, as Qwen3's). Parameter names equal
transformers' `Qwen3MoeForCausalLM`."""

from __future__ import annotations

from zoo.common.attention import QKNormAttention
from zoo.common.moe_decoder import MoeDecoderLayer, MoeDecoderModel, MoeForCausalLM


class Qwen3MoeDecoderLayer(MoeDecoderLayer):
    attention_cls = QKNormAttention


class Qwen3MoeModel(MoeDecoderModel):
    layer_cls = Qwen3MoeDecoderLayer


class Qwen3MoeForCausalLM(MoeForCausalLM):
    model_cls = Qwen3MoeModel
