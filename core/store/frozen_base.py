"""The frozen weights a checkpoint leaves out (a LoRA run's base, core/lora.py: the run
loads them again from where it started), known again by a fingerprint the checkpoint
records, so that a run resumed, exported or merged on other frozen weights (a changed
--init-from folder) is refused instead of silently wrong."""

from __future__ import annotations

import math

import torch
from torch import nn

from core.remat import first_stacked_layer
from core.sharding import STACKED

BASE_FINGERPRINT = "base_fingerprint"  # the checkpoint's `extra` entry that holds it


def fingerprint(model: nn.Module) -> dict[str, float]:
    """Per frozen weight (per layer in a scanned stack, by its Hugging Face name), its mean
    square; empty when every weight trains."""
    from torch.distributed.tensor import DTensor  # start-up

    names, values = [], []
    first = first_stacked_layer(dict(model.named_parameters()))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.requires_grad:
                continue
            stack, stacked, rest = name.partition(f".{STACKED}.")
            square = param.float().square()
            if stacked:
                names += [f"{stack}.{first[stack] + i}.{rest}" for i in range(param.shape[0])]
                value = square.flatten(1).mean(1)
            else:
                names.append(name)
                value = square.mean().reshape(1)
            values.append(value.full_tensor() if isinstance(value, DTensor) else value)
        return dict(zip(names, torch.cat(values).cpu().tolist())) if values else {}


def same_fingerprint(saved: dict[str, float], found: dict[str, float]) -> bool:
    """The same weights, up to summation order (another slice reduces in another order)."""
    return saved.keys() == found.keys() and all(
        math.isclose(saved[name], found[name], rel_tol=1e-4, abs_tol=1e-12) for name in saved)


def fits(extra: dict, model: nn.Module) -> bool:
    """Whether `model`'s frozen weights are those of the run that saved a checkpoint with
    `extra`."""
    return same_fingerprint(extra.get(BASE_FINGERPRINT, {}), fingerprint(model))
