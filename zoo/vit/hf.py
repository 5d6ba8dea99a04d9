"""Hugging Face checkpoints in: config.json -> ViTConfig, safetensors -> model.

Checkpoints saved by transformers 4 (most of the Hub, e.g. google/vit-base-patch16-224) use
the older layout `vit.encoder.layer.N.attention.attention.query`; they are renamed to the
transformers 5 names this model uses."""

from __future__ import annotations

import re

from core.hf import load_state, local_dir, read_config, read_safetensors
from zoo.vit.config import ViTConfig

LEGACY_NAMES = (
    (r"^vit\.encoder\.layer\.", "vit.layers."),
    (r"\.attention\.attention\.query\.", ".attention.q_proj."),
    (r"\.attention\.attention\.key\.", ".attention.k_proj."),
    (r"\.attention\.attention\.value\.", ".attention.v_proj."),
    (r"\.attention\.output\.dense\.", ".attention.o_proj."),
    (r"\.intermediate\.dense\.", ".mlp.fc1."),
    (r"\.output\.dense\.", ".mlp.fc2."),
)
# the config.json keys its weights' shapes are read from (never transformers' defaults)
REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "image_size", "patch_size")


def config_from_hf(name_or_path: str) -> ViTConfig:
    raw = read_config(name_or_path, REQUIRED)
    from transformers import ViTConfig as HFViTConfig  # transformers

    return ViTConfig.from_hf(HFViTConfig.from_dict(raw))


def current_name(name: str) -> str:
    for pattern, replacement in LEGACY_NAMES:
        name = re.sub(pattern, replacement, name)
    return name


def load_hf(model, name_or_path: str) -> None:
    """Copy an HF ViTForImageClassification checkpoint into `model` (either layout)."""
    state = read_safetensors(local_dir(name_or_path))
    state = {current_name(k): v for k, v in state.items() if not k.startswith("vit.pooler.")}
    load_state(model, state, name_or_path)
