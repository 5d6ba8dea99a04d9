"""What a run does when its numbers stop being numbers (`nan_policy`): `stop` ends it at the
first step whose loss or gradient norm is not finite, before that step is saved, so the last
checkpoint is a good one; `skip` leaves the weights and optimizer state as they were for
such a step, decided inside the step's graph (as MaxText and Levanter skip bad steps), and
goes on. Either way no checkpoint with non-finite weights is written."""

from __future__ import annotations

import contextlib
import math

import torch

from core.errors import UserError

NAN_POLICIES = ("stop", "skip")


class NonFiniteStep(UserError):
    """A step whose loss, gradient norm or weights are not finite."""


def updated_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list:
    """Everything an optimizer step writes on the device: the trained parameters and their state
    (AdamW's moments; not its step counter, a CPU scalar)."""
    state = [value for per_param in optimizer.state.values() for value in per_param.values()
             if isinstance(value, torch.Tensor) and value.device.type != "cpu"]
    return [*(p for p in model.parameters() if p.requires_grad), *state]


@contextlib.contextmanager
def undone_unless(finite: torch.Tensor, tensors: list[torch.Tensor]):
    """Run the block (an optimizer step); where `finite` is false, leave `tensors` as they
    were before it. The copies live in the step's graph: while the update runs, the device
    holds the old and the new parameters and optimizer state."""
    with torch.no_grad():
        before = [tensor.detach().clone() for tensor in tensors]
    yield
    with torch.no_grad():
        for tensor, old in zip(tensors, before):
            tensor.copy_(torch.where(finite, tensor, old))


def describe_non_finite(values: dict[str, float]) -> str | None:
    """'loss nan, grad_norm inf' for the step's non-finite numbers; None when all are."""
    bad = [f"{key} {value}" for key, value in values.items() if not math.isfinite(value)]
    return ", ".join(bad) or None


def weights_finite(model: torch.nn.Module) -> bool:
    """Whether every trained weight is finite (one small graph on the device, one bool
    back); a frozen base is as it was loaded."""
    checks = [torch.isfinite(p).all() for p in model.parameters() if p.requires_grad]
    return bool(torch.stack(checks).all().item())
