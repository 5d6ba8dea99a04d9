"""The sampler's cache layout of the grouped-query decoders (llama, qwen3, qwen3moe,
mixtral): each layer keeps its keys and values, [kv_heads, head_dim] a token, after the
rotary embedding; kv heads split as the activations' heads are (over `tensor`)."""

from __future__ import annotations

from core.sampler.cache import LayerLayout, Stream
from zoo.common.decoder_config import DecoderConfig


def gqa_layout(config: DecoderConfig) -> list[LayerLayout]:
    per_token = (config.num_key_value_heads, config.dim_per_head)
    spec = ("batch", None, "tensor", None)
    layer = LayerLayout((Stream("k", per_token, spec), Stream("v", per_token, spec)))
    return [layer] * config.num_hidden_layers
