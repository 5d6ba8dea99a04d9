"""Qwen3 (dense): zoo/common's decoder whose queries and keys are RMS-normed per head before
the rotary embedding (`QKNormAttention`), with Qwen3's parameter names, equal to
transformers' `Qwen3ForCausalLM`."""

from __future__ import annotations

from zoo.common.attention import QKNormAttention
from zoo.common.decoder import DecoderForCausalLM, DecoderLayer, DecoderModel


class Qwen3DecoderLayer(DecoderLayer):
    attention_cls = QKNormAttention


class Qwen3Model(DecoderModel):
    layer_cls = Qwen3DecoderLayer


class Qwen3ForCausalLM(DecoderForCausalLM):
    model_cls = Qwen3Model
