"""Remat as data: which layer classes recompute their activations in backward, and which
layer stacks run as one compiled `scan` body instead of an unrolled Python loop.

Models build their repeated blocks as a `LayerStack`; everything else is decided by a
`RematConfig` applied after the model is built, so model code never changes for memory.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
from torch import nn

from zoo.core.errors import UserError


class RematError(UserError):
    """A remat config that names layers or stacks the model does not have."""


@dataclasses.dataclass
class RematConfig:
    # Class names of layers whose forward is recomputed in backward (activation checkpointing).
    checkpoint: list[str] = dataclasses.field(default_factory=list)
    # Module names of LayerStacks to run with torch_xla's scan (compile one layer once).
    scan: list[str] = dataclasses.field(default_factory=list)


class LayerStack(nn.ModuleList):
    """Identical layers applied in sequence: `h = layer(h, *extras)` for each layer.

    `extras` (e.g. rotary tables, masks) are the same for every layer. A ModuleList subclass,
    so parameter names stay `<stack>.<i>.<...>` (Hugging Face compatible).
    """

    scan: bool = False
    remat_in_scan: bool = False
    _step_fn = None

    def forward(self, hidden: torch.Tensor, *extras):
        if self.scan and hidden.device.type == "xla":
            return self._scan(hidden, extras)
        for layer in self:
            hidden = layer(hidden, *extras)
        return hidden

    def _scan(self, hidden, extras):
        """One XLA while loop over the layers. The layer is traced (forward and backward,
        by AOTAutograd) on the first step only: torch_xla's scan cache (`is_fn_pure`) replays
        the trace while it is given the same function object, which is kept here (the cache
        holds it weakly, so a fresh bound method would miss every step)."""
        from functorch.compile import default_partition, min_cut_rematerialization_partition
        from torch_xla.experimental.scan import scan

        partition = min_cut_rematerialization_partition if self.remat_in_scan else default_partition
        weights = {name: torch.stack([dict(layer.named_parameters())[name] for layer in self])
                   for name, _ in self[0].named_parameters()}
        if self._step_fn is None:
            self._step_fn = functools.partial(LayerStack._layer_step, self)
        carry, _ = scan(self._step_fn, (hidden, *extras), weights, partition_fn=partition,
                        is_fn_pure=True)
        return carry[0]

    def _layer_step(self, carry, weights):
        """Layer 0's code on one layer's weights; extras ride along in the carry unchanged."""
        hidden, *extras = carry
        return (torch.func.functional_call(self[0], weights, (hidden, *extras)), *extras), None


def apply_remat(model: nn.Module, config: RematConfig) -> None:
    """Turn on checkpointing / scan in place; names that match nothing are errors."""
    modules = dict(model.named_modules())
    for path in config.scan:
        stack = modules.get(path)
        if not isinstance(stack, LayerStack):
            stacks = [n for n, m in modules.items() if isinstance(m, LayerStack)]
            raise RematError(
                f"remat.scan: '{path}' is not a LayerStack of this model; "
                f"stacks: {', '.join(stacks) or 'none'}"
            )
        stack.scan = True
    classes = {type(m).__name__ for m in modules.values()}
    for cls_name in config.checkpoint:
        if cls_name not in classes:
            raise RematError(
                f"remat.checkpoint: no layer of class '{cls_name}' in this model; "
                f"classes: {', '.join(sorted(classes))}"
            )
    scanned = {id(layer) for p in config.scan for layer in modules[p]}
    for path, module in modules.items():
        if type(module).__name__ not in config.checkpoint:
            continue
        if id(module) in scanned:
            # Inside scan the layer is traced once; remat is chosen by the scan partitioner.
            stack = modules[path.rsplit(".", 1)[0]]
            stack.remat_in_scan = True
        else:
            module.forward = functools.partial(checkpointed, module.forward)


def checkpointed(forward, *args, **kwargs):
    """Recompute `forward` in backward when gradients flow; plain call otherwise."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors):
        return forward(*args, **kwargs)
    if tensors[0].device.type != "xla":
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)
    # torch_xla's version adds an optimization barrier so XLA cannot CSE the recompute away.
    from torch_xla.utils.checkpoint import checkpoint

    return checkpoint(forward, *args, **kwargs)
