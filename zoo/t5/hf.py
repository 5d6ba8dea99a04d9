"""Hugging Face checkpoints in: config.json -> T5Config, safetensors -> model."""

from __future__ import annotations

from core.hf import load_state, local_dir, read_config, read_safetensors
from zoo.t5.config import T5Config

# transformers keeps tied aliases of `shared`; this model embeds through `shared` only.
EMBEDDING_ALIASES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
# the config.json keys its weights' shapes are read from (never transformers' defaults)
REQUIRED = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads")


def config_from_hf(name_or_path: str) -> T5Config:
    raw = read_config(name_or_path, REQUIRED)
    from transformers import T5Config as HFT5Config  # transformers

    return T5Config.from_hf(HFT5Config.from_dict(raw))


def load_hf(model, name_or_path: str) -> None:
    """Copy an HF T5ForConditionalGeneration (v1.1) checkpoint into `model`."""
    state = read_safetensors(local_dir(name_or_path))
    for alias in EMBEDDING_ALIASES:
        state.pop(alias, None)
    load_state(model, state, name_or_path)
