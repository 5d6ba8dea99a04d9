"""Checkpoint layouts of the Hub that transformers' own `save_pretrained` does not write,
made from a transformers state dict, for the loading tests."""

import torch


def experts_apart(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Stacked experts (`mlp.experts.gate_up_proj` [E, 2I, H], `down_proj` [E, H, I]) as the
    Hub's Qwen3-MoE and DeepSeek checkpoints hold them: each expert's gate_proj, up_proj and
    down_proj apart."""
    hub = {}
    for name, value in state.items():
        layer, _, which = name.partition(".mlp.experts.")
        if which == "gate_up_proj":
            for e, (gate, up) in enumerate(v.chunk(2) for v in value):
                hub[f"{layer}.mlp.experts.{e}.gate_proj.weight"] = gate.contiguous()
                hub[f"{layer}.mlp.experts.{e}.up_proj.weight"] = up.contiguous()
        elif which == "down_proj":
            for e, down in enumerate(value):
                hub[f"{layer}.mlp.experts.{e}.down_proj.weight"] = down.contiguous()
        else:
            hub[name] = value.contiguous()
    return hub
