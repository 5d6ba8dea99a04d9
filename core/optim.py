"""Optimizers and learning-rate schedules chosen by config.

`optim.name` is a built-in (adamw, sgd) or `package.module:ClassName` for your own
torch.optim.Optimizer subclass, checked with the config (before a model exists): it is
built with `lr` and `weight_decay`, or with `lr` alone when its constructor takes no
`weight_decay` (a one-line warning then says optim.weight_decay is not applied, unless it
is 0). An optimizer whose `step()` returns a dict of tensors gets those logged as metrics
(without leaving the step graph).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import sys

import torch
from torch.optim.optimizer import _get_scalar_dtype

from core.backends import zeros_like_param
from core.errors import UserError


@dataclasses.dataclass
class OptimConfig:
    name: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.1
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping

    def __post_init__(self):
        """Refuse numbers that would train to NaN (lr=inf) or diverge, before a model exists."""
        # lr 0 trains nothing (a frozen model, on purpose); grad_clip 0: no clipping
        for key in ("lr", "eps", "weight_decay", "grad_clip"):
            value, positive = getattr(self, key), key == "eps"
            if not math.isfinite(value) or value < 0 or (positive and value == 0):
                bound = "> 0" if positive else ">= 0"
                raise ValueError(f"optim.{key} must be a finite number {bound}, not {value}")
        if len(self.betas) != 2 or not all(0 <= beta < 1 for beta in self.betas):
            raise ValueError(f"optim.betas must be two numbers in [0, 1), e.g. [0.9, 0.95], "
                             f"not {list(self.betas)}")
        if self.name not in BUILT_IN:
            custom_optimizer(self.name)


@dataclasses.dataclass
class ScheduleConfig:
    warmup_steps: int = 10
    decay: str = "cosine"  # cosine | linear | constant, from the peak lr to min_lr_ratio x peak
    min_lr_ratio: float = 0.1

    def __post_init__(self):
        if self.warmup_steps < 0:
            raise ValueError(f"schedule.warmup_steps must be >= 0, not {self.warmup_steps}")
        if self.decay not in ("cosine", "linear", "constant"):
            raise ValueError(f"schedule.decay must be cosine, linear or constant, "
                             f"not {self.decay}")
        if not 0 <= self.min_lr_ratio <= 1:  # NaN fails too
            raise ValueError(f"schedule.min_lr_ratio must be in [0, 1], not {self.min_lr_ratio}")


BUILT_IN = ("adamw", "sgd")


def custom_optimizer(name: str) -> tuple[type[torch.optim.Optimizer], bool]:
    """(the class `package.module:ClassName` names, whether it takes weight_decay); a name
    that is not one, or names no Optimizer subclass taking `lr` (the schedule sets it),
    fails in one line."""
    module_name, _, class_name = name.partition(":")
    if not module_name or not class_name:
        raise UserError(f"unknown optimizer optim.name={name}; use adamw, sgd or "
                        "package.module:ClassName (a torch.optim.Optimizer subclass)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UserError(f"optim.name={name}: cannot import {module_name} ({error}); "
                        "check the name and that the module is on PYTHONPATH") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise UserError(f"optim.name={name}: module {module_name} has no '{class_name}'")
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        what = "a class but" if isinstance(cls, type) else f"a {type(cls).__name__},"
        raise UserError(f"optim.name={name} is {what} not a torch.optim.Optimizer subclass; "
                        "name one (e.g. torch.optim:Adam), or use adamw or sgd")
    parameters = inspect.signature(cls).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    if not takes_any and "lr" not in parameters:
        raise UserError(f"optim.name={name}: its constructor takes no lr, which optim.lr "
                        "and the schedule set; name an optimizer that takes one")
    return cls, takes_any or "weight_decay" in parameters


def build_optimizer(config: OptimConfig, params) -> torch.optim.Optimizer:
    params = list(params)
    if config.name == "adamw":
        return LazyTracedAdamW(
            params,
            lr=config.lr,
            betas=tuple(config.betas),
            eps=config.eps,
            weight_decay=config.weight_decay,
            foreach=True,
        )
    if config.name == "sgd":
        return torch.optim.SGD(
            params, lr=config.lr, momentum=config.betas[0], weight_decay=config.weight_decay,
            foreach=True,
        )
    cls, takes_weight_decay = custom_optimizer(config.name)
    if takes_weight_decay:
        return cls(params, lr=config.lr, weight_decay=config.weight_decay)
    if config.weight_decay:
        print(f"warning: optim.name={config.name} takes no weight_decay; training without "
              f"optim.weight_decay={config.weight_decay}", file=sys.stderr)
    return cls(params, lr=config.lr)


class LazyTracedAdamW(torch.optim.AdamW):
    """torch's AdamW (same math, hyper-parameters and state, so checkpoints move between the
    two) with its update written in the foreach ops torch_xla traces cheaply. torch's own
    update uses lerp, addcmul and addcdiv, which torch_xla shapes through Python meta
    functions one tensor at a time: tracing a 32-layer model's 291 parameters took 107 ms a
    step, this 50 ms. Options beyond torch's defaults (amsgrad, maximize, capturable) go to
    torch's update."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["amsgrad"] or group["maximize"] or group["capturable"] or group["fused"]:
                super().step()
                return loss
        for group in self.param_groups:
            self._update(group)
        return loss

    def _update(self, group: dict) -> None:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        grads = [p.grad for p in params]
        states = [self.state[p] for p in params]
        for param, state in zip(params, states):
            if not state:  # what torch's first step creates
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(param)
                state["exp_avg_sq"] = torch.zeros_like(param)
        steps = [state["step"] for state in states]
        torch._foreach_add_(steps, 1)  # CPU scalars, as torch keeps them
        steps = [step.item() for step in steps]
        lr, (beta1, beta2) = group["lr"], group["betas"]
        exp_avgs = [state["exp_avg"] for state in states]
        exp_avg_sqs = [state["exp_avg_sq"] for state in states]
        torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, torch._foreach_mul(grads, 1 - beta1))
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_add_(exp_avg_sqs, torch._foreach_mul(torch._foreach_mul(grads, grads),
                                                            1 - beta2))
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_mul_(denom, [1 / math.sqrt(1 - beta2**step) for step in steps])
        torch._foreach_add_(denom, group["eps"])
        updates = torch._foreach_div(exp_avgs, denom)
        torch._foreach_mul_(updates, [-lr / (1 - beta1**step) for step in steps])
        torch._foreach_add_(params, updates)


def create_state(optimizer: torch.optim.Optimizer) -> None:
    """Give AdamW/Adam and momentum SGD now the state their first step would create (zero
    moments with each parameter's sharding, step 0), so the train step is traced once with
    it and compiles once, not a second time when the state appears. Other optimizers keep
    their lazy state (and a second compile)."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state[param]
            if state:
                continue
            if type(optimizer) in (torch.optim.AdamW, torch.optim.Adam, LazyTracedAdamW):
                if group["fused"] or group["capturable"]:
                    return  # their step lives on the device: leave it to torch
                state["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype())
                moments = ["exp_avg", "exp_avg_sq"] + ["max_exp_avg_sq"] * group["amsgrad"]
                for key in moments:
                    state[key] = zeros_like_param(param)
            elif type(optimizer) is torch.optim.SGD and group["momentum"]:
                if group["dampening"]:
                    return  # its first step is not the zero-buffer update
                state["momentum_buffer"] = zeros_like_param(param)


def lr_multiplier(config: ScheduleConfig, total_steps: int):
    """step -> factor of the peak lr: linear warmup, then cosine/linear decay or constant."""

    def factor(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        if config.decay == "constant":
            return 1.0
        progress = min(
            1.0, (step - config.warmup_steps) / max(1, total_steps - config.warmup_steps)
        )
        shape = (
            0.5 * (1 + math.cos(math.pi * progress)) if config.decay == "cosine" else 1 - progress
        )
        return config.min_lr_ratio + (1 - config.min_lr_ratio) * shape

    return factor


def build_schedule(config: ScheduleConfig, optimizer, total_steps: int):
    # torch_xla uploads the changing Python lr as data, not a constant: no recompiles.
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(config, total_steps))
