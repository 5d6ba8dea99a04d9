"""Hugging Face DeepSeek-V3 checkpoints in: transformers' layout (experts stacked) and the
Hub's (each expert's gate_proj, up_proj, down_proj apart, as Qwen3-MoE's), loaded through
zoo/common/hf_experts.py's stacking. The Hub's multi-token-prediction layer (past
num_hidden_layers) is left out, as transformers leaves it; FP8 checkpoints
(quantization_config) are refused."""

from __future__ import annotations

import re

from core.errors import UserError
from core.hf import load_state, local_dir, read_config, read_safetensors
from zoo.common.hf_experts import GATE_UP_DOWN_EXPERTS, stack_experts
from zoo.deepseek3.config import DeepseekV3Config

LAYER = re.compile(r"model\.layers\.(\d+)\.")
# the config.json keys its weights' shapes are read from (never transformers' defaults)
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "n_routed_experts",
            "num_experts_per_tok", "n_shared_experts", "first_k_dense_replace", "q_lora_rank",
            "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def config_from_hf(name_or_path: str) -> DeepseekV3Config:
    raw = read_config(name_or_path, REQUIRED)
    if raw.get("quantization_config"):
        raise UserError(f"{name_or_path} holds {raw['quantization_config'].get('quant_method')} "
                        "weights; convert them to bf16 first (DeepSeek's fp8_cast_bf16.py)")
    from transformers import DeepseekV3Config as HFDeepseekV3Config  # transformers

    return DeepseekV3Config.from_hf(HFDeepseekV3Config.from_dict(raw))


def load_hf(model, name_or_path: str) -> None:
    """Copy an HF DeepseekV3ForCausalLM checkpoint (either layout) into `model`."""
    layers = model.config.num_hidden_layers
    state = {name: value for name, value in stack_experts(
        read_safetensors(local_dir(name_or_path)), GATE_UP_DOWN_EXPERTS).items()
        if not ((match := LAYER.match(name)) and int(match[1]) >= layers)}
    load_state(model, state, name_or_path)
