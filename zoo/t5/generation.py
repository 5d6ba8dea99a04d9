"""T5's cache for the device sampler (core/sampler): each decoder block's self-attention keeps
its keys and values, and its cross-attention the encoded prompt's, in that call order."""

from __future__ import annotations

from core.sampler.cache import LayerLayout, Stream
from zoo.t5.config import T5Config


def t5_layout(config: T5Config) -> list[LayerLayout]:
    spec = ("batch", None, "tensor", None)  # heads split as the attention weights are
    per_token = (config.num_heads, config.d_kv)
    streams = (Stream("k", per_token, spec), Stream("v", per_token, spec))
    block = [LayerLayout(streams), LayerLayout(streams, cross=True)]
    return block * config.num_decoder_layers
