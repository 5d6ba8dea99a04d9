"""A sampler that generates on the model's own devices: static-shape KV caches, one prefill per
prompt-length bucket and one decode step. It knows no model: a family supplies the cache
layout (`cache.LayerLayout`) and its attention writes through the `kv_cache` hook."""

from core.sampler.engine import Completions, Sampler, Timings
from core.sampler.params import SamplerShape, SamplingParams

__all__ = ["Completions", "Sampler", "SamplerShape", "SamplingParams", "Timings"]
