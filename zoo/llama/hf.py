"""Hugging Face checkpoints in: config.json -> LlamaConfig, safetensors -> model."""

from __future__ import annotations

from core.hf import load_state, local_dir, read_config, read_safetensors
from zoo.llama.config import LlamaConfig


def config_from_hf(name_or_path: str) -> LlamaConfig:
    from transformers import LlamaConfig as HFLlamaConfig  # transformers

    return LlamaConfig.from_hf(HFLlamaConfig.from_dict(read_config(name_or_path)))


def load_hf(model, name_or_path: str) -> None:
    """Copy an HF LlamaForCausalLM checkpoint into `model` (names must match exactly)."""
    state = read_safetensors(local_dir(name_or_path))
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    load_state(model, state, name_or_path)
