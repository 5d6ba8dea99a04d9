"""Optimizer state keyed by parameter name, the form a checkpoint holds it in: names survive
a rebuilt model and optimizer (a resumed run, another slice), where torch's integer ids
would not. Restored without a training step: zero tensors of the saved shapes are made
(the ones shaped like their parameter on the parameter's device, with its sharding), the
checkpoint is loaded into them in place, and the result goes to `optimizer.load_state_dict`.
"""

from __future__ import annotations

from itertools import zip_longest

import torch

from core.backends import zeros_like_param
from core.store.checkpoint_reader import CheckpointError
from core.store.location import Store


def param_names(model) -> dict[int, str]:
    return {id(p): name for name, p in model.named_parameters()}


def split_optimizer(optimizer, names: dict[int, str]):
    """Optimizer state keyed by parameter name: tensors (for DCP), other values, and the
    param groups with parameter names in place of the parameters."""
    tensors, values, groups = {}, {}, []
    for group in optimizer.param_groups:
        group_names = []
        for param in group["params"]:
            if id(param) not in names:
                raise CheckpointError(
                    "the optimizer holds a parameter that is not in the model; build the "
                    "optimizer from model.parameters()"
                )
            name = names[id(param)]
            group_names.append(name)
            for key, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor):
                    tensors[name, key] = value
                else:
                    values.setdefault(name, {})[key] = value
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": group_names})
    return tensors, values, groups


def check_groups(path: Store, optimizer, names: dict[int, str], saved_groups: list) -> None:
    if len(saved_groups) != len(optimizer.param_groups):
        raise CheckpointError(
            f"checkpoint {path} has {len(saved_groups)} optimizer param groups but the "
            f"optimizer has {len(optimizer.param_groups)}"
        )
    for index, (group, saved) in enumerate(zip(optimizer.param_groups, saved_groups)):
        current = [names.get(id(p), "?") for p in group["params"]]
        for position, (ours, theirs) in enumerate(zip_longest(current, saved["params"])):
            if ours != theirs:
                raise CheckpointError(
                    f"checkpoint {path}: optimizer param group {index} has '{ours}' at "
                    f"position {position} but the checkpoint has '{theirs}'"
                )


def optimizer_targets(optimizer, names: dict[int, str], saved: dict) -> dict:
    """Zero tensors to load the saved optimizer state into, one per saved tensor.

    State shaped like its parameter (exp_avg, exp_avg_sq, ...) lives on the parameter's device
    with the parameter's sharding, which is what a training step would have created; anything
    else (AdamW's scalar `step`) is a CPU tensor, as torch keeps it.
    """
    by_param: dict[str, dict] = {}
    for fqn, md in saved.items():
        if fqn.startswith("optim.") and hasattr(md, "size"):
            name, _, key = fqn[len("optim.") :].rpartition(".")
            by_param.setdefault(name, {})[key] = md
    targets = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            name = names[id(param)]
            for key, md in by_param.get(name, {}).items():
                if len(md.size) and tuple(md.size) == tuple(param.shape):
                    zeros = zeros_like_param(param, md.properties.dtype)
                else:
                    zeros = torch.zeros(md.size, dtype=md.properties.dtype)
                targets[name, key] = zeros
    return targets


def optimizer_state_dict(optimizer, names: dict[int, str], tensors: dict, trainer: dict):
    """The loaded state in `optimizer.state_dict()` form (integer ids in group order)."""
    state, groups, index = {}, [], 0
    for group, saved in zip(optimizer.param_groups, trainer["param_groups"]):
        ids = []
        for param in group["params"]:
            name = names[id(param)]
            entry = {key: t for (n, key), t in tensors.items() if n == name}
            entry.update(trainer["optimizer_values"].get(name, {}))
            if entry:
                state[index] = entry
            ids.append(index)
            index += 1
        groups.append({**saved, "params": ids})
    return {"state": state, "param_groups": groups}
