"""Hugging Face Qwen3 config.json -> Qwen3Config. The weights' names are transformers' own,
so zoo/common/hf_weights.py loads them."""

from __future__ import annotations

from core.hf import read_config
from zoo.common.decoder_config import HF_REQUIRED
from zoo.qwen3.config import Qwen3Config

# the config.json keys its weights' shapes are read from (never transformers' defaults)
REQUIRED = (*HF_REQUIRED, "num_key_value_heads", "head_dim")


def config_from_hf(name_or_path: str) -> Qwen3Config:
    """transformers' Qwen3Config guesses 32 KV heads of 128: both must be given."""
    raw = read_config(name_or_path, REQUIRED)
    from transformers import Qwen3Config as HFQwen3Config  # transformers

    return Qwen3Config.from_hf(HFQwen3Config.from_dict(raw))
