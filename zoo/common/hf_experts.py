"""Hub checkpoints' per-expert names, stacked into the layout of transformers 5 and the zoo.
Hub checkpoints store each expert apart (`mlp.experts.<e>.gate_proj.weight`, Mixtral's
`block_sparse_moe.experts.<e>.w1.weight`); transformers 5 and the zoo hold them stacked per
layer (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`). A family names its checkpoints'
pattern (`PerExpertNames`) and loads either layout through `load_hf_experts`."""

from __future__ import annotations

import dataclasses
import re

import torch

from core.hf import local_dir, read_safetensors
from zoo.common.hf_weights import load_decoder_state


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


# transformers' own per-expert names (Qwen3-MoE's and DeepSeek-V3's Hub checkpoints)
GATE_UP_DOWN_EXPERTS = PerExpertNames(
    re.compile(r"(.+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight"),
    gate="gate_proj", up="up_proj", down="down_proj")


def stack_experts(state: dict[str, torch.Tensor],
                  names: PerExpertNames) -> dict[str, torch.Tensor]:
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


def load_hf_experts(model, name_or_path: str, names: PerExpertNames) -> None:
    """Copy an HF mixture-of-experts checkpoint (either layout) into `model`."""
    state = stack_experts(read_safetensors(local_dir(name_or_path)), names)
    load_decoder_state(model, state, name_or_path)
