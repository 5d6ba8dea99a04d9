"""Mixtral configuration: a Llama decoder whose MLP is a top-k routed mixture of experts;
convertible to and from Hugging Face `MixtralConfig`."""

from __future__ import annotations

import dataclasses
import math

from core.config import check_sizes, same_named
from zoo.llama.config import HF_SAME_NAMES as LLAMA_SAME_NAMES
from zoo.llama.config import LlamaConfig

DISPATCHES = ("capacity", "dense")


@dataclasses.dataclass
class MixtralConfig(LlamaConfig):
    intermediate_size: int = 512  # per expert
    rope_theta: float = 1e6
    num_local_experts: int = 4
    num_experts_per_tok: int = 2
    # the chosen experts' router probabilities renormalised to sum to 1 (Mixtral always;
    # Qwen3-MoE's norm_topk_prob)
    norm_topk_prob: bool = True
    router_aux_loss_coef: float = 0.001  # weight of the load-balancing loss in training
    # How tokens reach experts, with static shapes either way:
    #   capacity: each expert takes at most capacity_factor x its fair share of a sequence's
    #     tokens (GShard); the rest are dropped (they skip the MoE, the residual carries them)
    #   dense: every expert runs on every token, weighted by the router (dropless, E/k x FLOPs)
    # A model in eval mode (`model.eval()`: generation, export checks) always runs dense,
    # dropping nothing, as transformers' Mixtral does.
    dispatch: str = "capacity"
    capacity_factor: float = 1.0

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

    def to_hf(self):
        from transformers import MixtralConfig as HFMixtralConfig  # transformers

        return HFMixtralConfig(
            **same_named(self, HF_SAME_NAMES),
            head_dim=self.dim_per_head,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            tie_word_embeddings=self.tie_word_embeddings,
            initializer_range=self.initializer_range,
            eos_token_id=self.eos_token_id,
            output_router_logits=False,
            router_jitter_noise=0.0,
            sliding_window=None,
        )

    @classmethod
    def from_hf(cls, hf) -> MixtralConfig:
        if getattr(hf, "sliding_window", None):
            raise ValueError(f"sliding_window={hf.sliding_window} is not supported (Mixtral "
                             "8x7B v0.1 and later have none)")
        rope = dict(getattr(hf, "rope_parameters", None) or {})
        eos = hf.eos_token_id[0] if isinstance(hf.eos_token_id, list) else hf.eos_token_id
        return cls(
            **same_named(hf, HF_SAME_NAMES),
            head_dim=getattr(hf, "head_dim", None),
            rope_theta=float(rope.get("rope_theta", getattr(hf, "rope_theta", 1e6))),
            tie_word_embeddings=bool(hf.tie_word_embeddings),
            eos_token_id=eos,
        )


HF_SAME_NAMES = (*LLAMA_SAME_NAMES, "num_key_value_heads", "num_local_experts",
                 "num_experts_per_tok", "router_aux_loss_coef")

SIZES: dict[str, MixtralConfig] = {
    "tiny": MixtralConfig(),
    "8x7b": MixtralConfig(  # Mixtral 8x7B v0.1
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=32768, num_local_experts=8, num_experts_per_tok=2,
        router_aux_loss_coef=0.02, bos_token_id=1, eos_token_id=2),
}
