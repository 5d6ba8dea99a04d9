"""Hugging Face config.json -> LlamaConfig. The weights' names are transformers' own, so
zoo/common/hf_weights.py loads them."""

from __future__ import annotations

from core.hf import read_config
from zoo.common.decoder_config import HF_REQUIRED
from zoo.llama.config import LlamaConfig


def config_from_hf(name_or_path: str) -> LlamaConfig:
    raw = read_config(name_or_path, HF_REQUIRED)
    from transformers import LlamaConfig as HFLlamaConfig  # transformers

    return LlamaConfig.from_hf(HFLlamaConfig.from_dict(raw))
