"""Llama 3 style decoder: zoo/common's decoder as it is (RMSNorm, rotary embeddings with
Llama 3 scaling, SwiGLU, grouped-query attention, optional tied embeddings), under Llama's
class names. Parameter names equal `transformers.LlamaForCausalLM`'s, so its safetensors
load directly."""

from __future__ import annotations

from zoo.common.decoder import DecoderForCausalLM, DecoderLayer, DecoderModel
from zoo.common.norms import RMSNorm


class LlamaRMSNorm(RMSNorm):
    """zoo/common's RMSNorm under Llama's name (messages name a module by its class)."""


class LlamaDecoderLayer(DecoderLayer):
    norm_cls = LlamaRMSNorm


class LlamaModel(DecoderModel):
    layer_cls = LlamaDecoderLayer
    norm_cls = LlamaRMSNorm


class LlamaForCausalLM(DecoderForCausalLM):
    model_cls = LlamaModel
