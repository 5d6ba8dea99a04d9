"""DeepSeek-V3's sampler cache layout: multi-head latent attention keeps each token's
compressed latent (normed, `kv_lora_rank` wide) and its rotary key part
(`qk_rope_head_dim`, shared by the heads), not per-head keys and values: 512 + 64 values a
token at 671B scale instead of 128 x (192 + 128). Decode up-projects them as training does."""

from __future__ import annotations

from core.sampler.cache import LayerLayout, Stream
from zoo.deepseek3.config import DeepseekV3Config


def mla_layout(config: DeepseekV3Config) -> list[LayerLayout]:
    spec = ("batch", None, None)
    layer = LayerLayout((Stream("latent", (config.kv_lora_rank,), spec),
                         Stream("k_rope", (config.qk_rope_head_dim,), spec)))
    return [layer] * config.num_hidden_layers
