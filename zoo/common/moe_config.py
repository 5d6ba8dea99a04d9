"""The mixture-of-experts decoder configuration (routing, dispatch, capacity, expert
parallelism) that the MoE families subclass with their defaults, sizes and HF conversion."""

from __future__ import annotations

import dataclasses
import math

from core.config import check_sizes
from zoo.common.architecture import run_time
from zoo.common.decoder_config import DecoderConfig

DISPATCHES = ("capacity", "dense")


@dataclasses.dataclass
class MoeConfig(DecoderConfig):
    """`intermediate_size` is one expert's width."""

    num_local_experts: int = 4
    num_experts_per_tok: int = 2
    # the chosen experts' router probabilities renormalised to sum to 1 (Mixtral always;
    # Qwen3-MoE's norm_topk_prob)
    norm_topk_prob: bool = True
    router_aux_loss_coef: float = run_time(0.001)  # weight of the load-balancing loss in training
    # How tokens reach experts, with static shapes either way:
    #   capacity: each expert takes at most capacity_factor x its fair share of a sequence's
    #     tokens (GShard); the rest are dropped (they skip the MoE, the residual carries them)
    #   dense: every expert runs on every token, weighted by the router (dropless, E/k x FLOPs)
    # A model in eval mode (`model.eval()`: generation, export checks) always runs dense,
    # dropping nothing, as transformers' Mixtral does.
    dispatch: str = run_time("capacity")
    capacity_factor: float = run_time(1.0)

    def __post_init__(self):
        super().__post_init__()
        if not 1 <= self.num_experts_per_tok <= self.num_local_experts:
            raise ValueError(
                f"model.num_experts_per_tok ({self.num_experts_per_tok}) must be between 1 "
                f"and model.num_local_experts ({self.num_local_experts})")
        if self.dispatch not in DISPATCHES:
            raise ValueError(f"model.dispatch must be {' or '.join(DISPATCHES)}, "
                             f"not {self.dispatch}")
        check_sizes(self, positive=("capacity_factor",))
        if not 0 <= self.router_aux_loss_coef < math.inf:
            raise ValueError(f"model.router_aux_loss_coef must be a finite number >= 0, "
                             f"not {self.router_aux_loss_coef}")

    def mesh_divides(self) -> dict[str, dict[str, int]]:
        experts = {"model.num_local_experts": self.num_local_experts}
        return {**super().mesh_divides(), "expert": experts}

    def expert_capacity(self, group_tokens: int) -> int:
        """Tokens one expert takes from a group (a sequence) under capacity dispatch."""
        fair_share = group_tokens * self.num_experts_per_tok / self.num_local_experts
        return max(1, min(group_tokens, math.ceil(self.capacity_factor * fair_share)))
