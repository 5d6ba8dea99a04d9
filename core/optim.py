"""Optimizers and learning-rate schedules chosen by config.

`optim.name` is a built-in (adamw, sgd) or `package.module:ClassName` for your own
torch.optim.Optimizer. An optimizer whose `step()` returns a dict of tensors gets those
logged as metrics (without leaving the step graph).
"""

from __future__ import annotations

import dataclasses
import importlib
import math

import torch

from zoo.core.errors import UserError


@dataclasses.dataclass
class OptimConfig:
    name: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.1
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping


@dataclasses.dataclass
class ScheduleConfig:
    warmup_steps: int = 10
    decay: str = "cosine"  # cosine | linear | constant, from the peak lr to min_lr_ratio x peak
    min_lr_ratio: float = 0.1


def build_optimizer(config: OptimConfig, params) -> torch.optim.Optimizer:
    params = list(params)
    if config.name == "adamw":
        return torch.optim.AdamW(
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
    if ":" not in config.name:
        raise UserError(
            f"unknown optimizer '{config.name}'; use adamw, sgd or package.module:ClassName"
        )
    module_name, _, class_name = config.name.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise UserError(f"cannot load optimizer '{config.name}': {error}") from None
    return cls(params, lr=config.lr, weight_decay=config.weight_decay)


def create_state(optimizer: torch.optim.Optimizer) -> None:
    """Give AdamW/Adam and momentum SGD now the state their first step would create (zero
    moments with each parameter's sharding, step 0), so the train step is traced once with
    it and compiles once, not a second time when the state appears. Other optimizers keep
    their lazy state (and a second compile)."""
    from torch.optim.optimizer import _get_scalar_dtype

    from zoo.core.sharding import zeros_like_param

    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state[param]
            if state:
                continue
            if type(optimizer) in (torch.optim.AdamW, torch.optim.Adam):
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
    if config.decay not in ("cosine", "linear", "constant"):
        raise UserError(f"schedule.decay must be cosine, linear or constant, not {config.decay}")

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
