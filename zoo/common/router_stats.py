"""What routing over a whole forward amounts to: the load-balancing loss the training loss
adds, and the balance and dropped fraction the logs show."""

from __future__ import annotations

import dataclasses

import torch

from zoo.common.moe_config import MoeConfig


@dataclasses.dataclass
class RouterStats:
    """Routing over the whole forward: the load-balancing loss (differentiable), expert load
    balance (the busiest expert's share of assignments over the mean share: 1.0 is even), and
    the fraction of top-k assignments dropped by capacity dispatch."""

    aux_loss: torch.Tensor
    balance: torch.Tensor
    dropped_fraction: torch.Tensor


def router_stats(stats: torch.Tensor, tokens: int, config: MoeConfig) -> RouterStats:
    """From every routed layer's statistics [layers, 2E + 1] (zoo/common/moe.py's), `tokens`
    per layer."""
    experts = config.num_local_experts
    tokens_per_expert, router_probs, kept = stats.split((experts, experts, 1), dim=-1)
    load = tokens_per_expert.sum(0)
    assignments = tokens * config.num_experts_per_tok * tokens_per_expert.shape[0]
    return RouterStats(
        aux_loss=load_balancing_loss(tokens_per_expert, router_probs, tokens),
        balance=load.max() / load.mean(),
        dropped_fraction=1 - kept.sum() / assignments,
    )


def load_balancing_loss(tokens_per_expert, router_probs, tokens: int):
    """transformers' `load_balancing_loss_func` (Switch Transformer): with counts and
    probabilities summed over all layers, E x sum_e (fraction routed to e) x (mean prob of e).
    Inputs [layers, E]; `tokens` per layer."""
    rows = tokens * tokens_per_expert.shape[0]
    num_experts = tokens_per_expert.shape[-1]
    return num_experts * torch.sum(tokens_per_expert.sum(0) / rows * router_probs.sum(0) / rows)
