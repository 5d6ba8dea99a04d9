"""Hugging Face Mixtral checkpoints in. Hub checkpoints (e.g. mistralai/Mixtral-8x7B-v0.1)
store each expert apart, `block_sparse_moe.experts.<e>.w1/w2/w3.weight`; transformers 5 and
the zoo hold them stacked per layer (zoo/common/hf_experts.py). Both layouts load."""

from __future__ import annotations

import re

from core.hf import read_config
from zoo.common.decoder_config import HF_REQUIRED
from zoo.common.hf_experts import PerExpertNames, load_hf_experts
from zoo.mixtral.config import MixtralConfig

MIXTRAL_EXPERTS = PerExpertNames(
    re.compile(r"(.+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight"),
    gate="w1", up="w3", down="w2", block="block_sparse_moe")
# the config.json keys its weights' shapes are read from (never transformers' defaults)
REQUIRED = (*HF_REQUIRED, "num_key_value_heads", "num_local_experts", "num_experts_per_tok")


def config_from_hf(name_or_path: str) -> MixtralConfig:
    raw = read_config(name_or_path, REQUIRED)
    from transformers import MixtralConfig as HFMixtralConfig  # transformers

    return MixtralConfig.from_hf(HFMixtralConfig.from_dict(raw))


def load_hf(model, name_or_path: str) -> None:
    """Copy an HF MixtralForCausalLM checkpoint (either layout) into `model`."""
    load_hf_experts(model, name_or_path, MIXTRAL_EXPERTS)
