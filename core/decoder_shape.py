"""The few numbers of a decoder stack that FLOPs and activation estimates need: a family maps
its config to them once (core/flops.py and core/memory.py read them)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DecoderShape:
    layers: int
    hidden: int
    heads: int
    vocab: int  # the output layer's width (the LM head; a classifier's labels)
    kv_heads: int | None = None  # default: heads (no grouped-query attention)
    head_dim: int | None = None  # default: hidden // heads
    intermediate: int | None = None  # MLP width; default 4 x hidden
    gated_mlp: bool = True  # SwiGLU-style (3 matrices) or plain (2)
    experts_per_token: int = 1  # MLPs each token runs through (a mixture of experts: its k)
    router_experts: int = 0  # a mixture of experts' router width (hidden x experts); 0: none

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def mlp_width(self) -> int:
        return self.intermediate or 4 * self.hidden
