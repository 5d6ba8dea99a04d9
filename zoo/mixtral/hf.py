"""Hugging Face Mixtral checkpoints in. Hub checkpoints (e.g. mistralai/Mixtral-8x7B-v0.1)
store each expert apart, `block_sparse_moe.experts.<e>.w1/w2/w3.weight`; transformers 5 and
the zoo hold them stacked per layer (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`).
Both layouts load. Other mixture-of-experts families name their experts' matrices their own
way (`PerExpertNames`: qwen3moe's) and load through the same stacking."""

from __future__ import annotations

import dataclasses
import re

import torch

from core.hf import load_state, local_dir, read_config, read_safetensors
from zoo.mixtral.config import MixtralConfig


@dataclasses.dataclass(frozen=True)
class PerExpertNames:
    """How a Hub checkpoint names each expert's matrices apart: `key` matches one matrix's
    name with groups (layer, expert index, matrix); `gate`, `up`, `down` name the SwiGLU's
    three matrices; `block` is the MoE block's name there, `mlp` here."""

    key: re.Pattern
    gate: str
    up: str
    down: str
    block: str = "mlp"


MIXTRAL_EXPERTS = PerExpertNames(
    re.compile(r"(.+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight"),
    gate="w1", up="w3", down="w2", block="block_sparse_moe")


def config_from_hf(name_or_path: str) -> MixtralConfig:
    from transformers import MixtralConfig as HFMixtralConfig  # transformers

    return MixtralConfig.from_hf(HFMixtralConfig.from_dict(read_config(name_or_path)))


def stack_experts(state: dict[str, torch.Tensor],
                  names: PerExpertNames = MIXTRAL_EXPERTS) -> dict[str, torch.Tensor]:
    """Per-expert Hub names -> stacked ones: gate and up become gate_up_proj [E, 2I, H],
    down becomes down_proj [E, H, I]; the block is renamed `mlp` (Mixtral's router
    `block_sparse_moe.gate` becomes `mlp.gate`). A state already stacked passes unchanged."""
    out, experts = {}, {}
    for name, value in state.items():
        if match := names.key.fullmatch(name):
            layer, index, which = match.groups()
            experts.setdefault(layer, {}).setdefault(which, {})[int(index)] = value
        else:
            out[name.replace(f".{names.block}.", ".mlp.")] = value
    for layer, weights in experts.items():
        ordered = {w: [weights[w][i] for i in sorted(weights[w])]
                   for w in (names.gate, names.up, names.down)}
        gate_up = [torch.cat(pair)
                   for pair in zip(ordered[names.gate], ordered[names.up], strict=True)]
        out[f"{layer}.mlp.experts.gate_up_proj"] = torch.stack(gate_up)
        out[f"{layer}.mlp.experts.down_proj"] = torch.stack(ordered[names.down])
    return out


def load_hf(model, name_or_path: str, names: PerExpertNames = MIXTRAL_EXPERTS) -> None:
    """Copy an HF mixture-of-experts checkpoint (either layout) into `model`."""
    state = stack_experts(read_safetensors(local_dir(name_or_path)), names)
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    load_state(model, state, name_or_path)
