"""Mixtral configuration: the mixture-of-experts decoder's fields (zoo/common/moe_config.py),
Mixtral's defaults and published shape; convertible to and from Hugging Face `MixtralConfig`."""

from __future__ import annotations

import dataclasses

from core.config import same_named
from zoo.common.decoder_config import HF_SAME_NAMES as DECODER_SAME_NAMES
from zoo.common.decoder_config import eos_from_hf
from zoo.common.moe_config import MoeConfig


@dataclasses.dataclass
class MixtralConfig(MoeConfig):
    intermediate_size: int = 512  # per expert
    rope_theta: float = 1e6

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
        return cls(
            **same_named(hf, HF_SAME_NAMES),
            head_dim=getattr(hf, "head_dim", None),
            rope_theta=float(rope.get("rope_theta", getattr(hf, "rope_theta", 1e6))),
            tie_word_embeddings=bool(hf.tie_word_embeddings),
            eos_token_id=eos_from_hf(hf),
        )


HF_SAME_NAMES = (*DECODER_SAME_NAMES, "num_key_value_heads", "num_local_experts",
                 "num_experts_per_tok", "router_aux_loss_coef")

SIZES: dict[str, MixtralConfig] = {
    "tiny": MixtralConfig(),
    "8x7b": MixtralConfig(  # Mixtral 8x7B v0.1
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=32768, num_local_experts=8, num_experts_per_tok=2,
        router_aux_loss_coef=0.02, bos_token_id=1, eos_token_id=2),
}
