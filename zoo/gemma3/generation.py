"""Gemma 3's sampler cache layout: keys and values as every grouped-query decoder keeps them
(zoo/common/generation.py), its local layers in a ring of `sliding_window` slots (the cache
keeps what they can see, not the whole sequence), its global layers whole."""

from __future__ import annotations

import dataclasses

from core.sampler.cache import LayerLayout
from zoo.common.generation import gqa_layout
from zoo.gemma3.config import GLOBAL, Gemma3Config


def gemma3_layout(config: Gemma3Config) -> list[LayerLayout]:
    return [layer if kind == GLOBAL else dataclasses.replace(layer, window=config.sliding_window)
            for layer, kind in zip(gqa_layout(config), config.layer_types, strict=True)]
