"""Hugging Face Qwen3-MoE checkpoints in. Hub checkpoints (Qwen/Qwen3-30B-A3B) store each
expert apart, `mlp.experts.<e>.gate_proj/up_proj/down_proj.weight`; transformers 5 and the
zoo hold them stacked per layer (zoo/common/hf_experts.py). Both layouts load."""

from __future__ import annotations

from core.hf import read_config
from zoo.common.hf_experts import GATE_UP_DOWN_EXPERTS, load_hf_experts
from zoo.qwen3moe.config import Qwen3MoeConfig

# the config.json keys its weights' shapes are read from (never transformers' defaults)
# (transformers 5 writes num_experts as num_local_experts)
REQUIRED = ("vocab_size", "hidden_size", "moe_intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", ("num_experts", "num_local_experts"),
            "num_experts_per_tok")


def config_from_hf(name_or_path: str) -> Qwen3MoeConfig:
    raw = read_config(name_or_path, REQUIRED)
    from transformers import Qwen3MoeConfig as HFQwen3MoeConfig  # transformers

    return Qwen3MoeConfig.from_hf(HFQwen3MoeConfig.from_dict(raw))


def load_hf(model, name_or_path: str) -> None:
    """Copy an HF Qwen3MoeForCausalLM checkpoint (either layout) into `model`."""
    load_hf_experts(model, name_or_path, GATE_UP_DOWN_EXPERTS)
