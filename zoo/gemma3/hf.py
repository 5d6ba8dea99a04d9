"""Hugging Face Gemma 3 config.json -> Gemma3Config. The weights' names are transformers'
own, so zoo/common/hf_weights.py loads them."""

from __future__ import annotations

from core.hf import read_config
from zoo.common.decoder_config import HF_REQUIRED
from zoo.gemma3.config import Gemma3Config

# the config.json keys its weights' shapes are read from (never transformers' defaults)
REQUIRED = (*HF_REQUIRED, "num_key_value_heads", "head_dim")


def config_from_hf(name_or_path: str) -> Gemma3Config:
    raw = read_config(name_or_path, REQUIRED)
    from transformers import Gemma3TextConfig  # transformers

    return Gemma3Config.from_hf(Gemma3TextConfig.from_dict(raw))
