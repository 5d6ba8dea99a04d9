"""Qwen3-MoE configuration: the mixture-of-experts decoder's fields (zoo/common/moe_config.py:
routing, capacity, expert parallelism) with Qwen3's defaults and published shapes;
convertible to and from Hugging Face `Qwen3MoeConfig`, whose names differ (num_experts,
moe_intermediate_size)."""

from __future__ import annotations

import dataclasses

from core.config import same_named
from zoo.common.decoder_config import HF_SAME_NAMES as DECODER_SAME_NAMES
from zoo.common.decoder_config import qwen3_fields_from_hf
from zoo.common.moe_config import MoeConfig

# transformers' name -> ours, where they differ
HF_RENAMED = {"num_experts": "num_local_experts", "moe_intermediate_size": "intermediate_size"}


@dataclasses.dataclass
class Qwen3MoeConfig(MoeConfig):
    intermediate_size: int = 256  # per expert (transformers' moe_intermediate_size)
    head_dim: int | None = 64
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    num_local_experts: int = 8
    num_experts_per_tok: int = 2

    def to_hf(self):
        from transformers import Qwen3MoeConfig as HFQwen3MoeConfig  # transformers

        return HFQwen3MoeConfig(
            **same_named(self, HF_SAME_NAMES),
            **{theirs: getattr(self, ours) for theirs, ours in HF_RENAMED.items()},
            head_dim=self.dim_per_head,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            tie_word_embeddings=self.tie_word_embeddings,
            initializer_range=self.initializer_range,
            eos_token_id=self.eos_token_id,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            use_sliding_window=False,
        )

    @classmethod
    def from_hf(cls, hf) -> Qwen3MoeConfig:
        """From a `transformers.Qwen3MoeConfig`. Dense layers among the sparse ones
        (mlp_only_layers, decoder_sparse_step > 1), which no released Qwen3-MoE has, are
        refused, as Qwen3's fields refuse what they do (`qwen3_fields_from_hf`)."""
        if getattr(hf, "mlp_only_layers", None) or getattr(hf, "decoder_sparse_step", 1) != 1:
            raise ValueError("dense layers among the experts (mlp_only_layers, "
                             "decoder_sparse_step > 1) are not supported: every released "
                             "Qwen3-MoE routes every layer")
        return cls(**same_named(hf, HF_SAME_NAMES),
                   **{ours: getattr(hf, theirs) for theirs, ours in HF_RENAMED.items()},
                   **qwen3_fields_from_hf(hf))


HF_SAME_NAMES = (*(n for n in DECODER_SAME_NAMES if n != "intermediate_size"),
                 "num_key_value_heads", "num_experts_per_tok", "router_aux_loss_coef",
                 "norm_topk_prob")


def _qwen3_moe(hidden, expert_intermediate, layers, heads) -> Qwen3MoeConfig:
    """A released Qwen3-MoE shape (Qwen/Qwen3-*-A*B): 128 experts, 8 routed per token, no
    shared expert, 4 KV heads of 128, 152k vocab, theta 1e6."""
    return Qwen3MoeConfig(
        vocab_size=151936, hidden_size=hidden, intermediate_size=expert_intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=4,
        head_dim=128, max_position_embeddings=40960, num_local_experts=128,
        num_experts_per_tok=8, router_aux_loss_coef=0.001, tie_word_embeddings=False,
        bos_token_id=151643, eos_token_id=151645)


SIZES: dict[str, Qwen3MoeConfig] = {
    "tiny": Qwen3MoeConfig(),
    "30b-a3b": _qwen3_moe(2048, 768, 48, 32),
    "235b-a22b": _qwen3_moe(4096, 1536, 94, 64),
}
