"""Hugging Face safetensors into a decoder whose parameter names equal transformers' (every
family here): a tied model takes no `lm_head.weight`."""

from __future__ import annotations

import torch

from core.hf import load_state, local_dir, read_safetensors


def load_hf(model, name_or_path: str) -> None:
    """Copy an HF checkpoint into `model` (names must match exactly)."""
    load_decoder_state(model, read_safetensors(local_dir(name_or_path)), name_or_path)


def load_decoder_state(model, state: dict[str, torch.Tensor], name_or_path: str) -> None:
    """Copy `state` (read from `name_or_path`, named as `model`'s) into `model`."""
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    load_state(model, state, name_or_path)
