"""Hugging Face Mixtral checkpoints in. Hub checkpoints (e.g. mistralai/Mixtral-8x7B-v0.1)
store each expert apart, `block_sparse_moe.experts.<e>.w1/w2/w3.weight`; transformers 5 and
the zoo hold them stacked per layer (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`).
Both layouts load."""

from __future__ import annotations

import re

import torch

from core.hf import load_state, local_dir, read_config, read_safetensors
from zoo.mixtral.config import MixtralConfig

EXPERT_KEY = re.compile(r"(.+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight")


def config_from_hf(name_or_path: str) -> MixtralConfig:
    from transformers import MixtralConfig as HFMixtralConfig  # transformers

    return MixtralConfig.from_hf(HFMixtralConfig.from_dict(read_config(name_or_path)))


def stack_experts(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert Hub names -> stacked ones: w1 (gate) and w3 (up) become gate_up_proj
    [E, 2I, H], w2 becomes down_proj [E, H, I]; the router `block_sparse_moe.gate` becomes
    `mlp.gate`. A state already stacked passes unchanged."""
    out, experts = {}, {}
    for name, value in state.items():
        if match := EXPERT_KEY.fullmatch(name):
            layer, index, which = match.groups()
            experts.setdefault(layer, {}).setdefault(which, {})[int(index)] = value
        else:
            out[name.replace(".block_sparse_moe.", ".mlp.")] = value
    for layer, weights in experts.items():
        ordered = {w: [weights[w][i] for i in sorted(weights[w])] for w in ("w1", "w2", "w3")}
        gate_up = [torch.cat(pair) for pair in zip(ordered["w1"], ordered["w3"], strict=True)]
        out[f"{layer}.mlp.experts.gate_up_proj"] = torch.stack(gate_up)
        out[f"{layer}.mlp.experts.down_proj"] = torch.stack(ordered["w2"])
    return out


def load_hf(model, name_or_path: str) -> None:
    """Copy an HF MixtralForCausalLM checkpoint (either layout) into `model`."""
    state = stack_experts(read_safetensors(local_dir(name_or_path)))
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    load_state(model, state, name_or_path)
