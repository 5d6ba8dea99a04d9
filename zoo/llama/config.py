"""Llama 3 style decoder configuration (zoo/common/decoder_config.py's fields), Llama's
published shapes; convertible to and from Hugging Face `LlamaConfig`."""

from __future__ import annotations

import dataclasses

from core.config import same_named
from zoo.common.decoder_config import HF_SAME_NAMES, DecoderConfig, RopeScaling, eos_from_hf


@dataclasses.dataclass
class LlamaConfig(DecoderConfig):
    def to_hf(self):
        """The equivalent `transformers.LlamaConfig` (for export and parity tests)."""
        from transformers import LlamaConfig as HFLlamaConfig  # transformers

        rope = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.rope_scaling:
            rope = {**rope, "rope_type": "llama3", **dataclasses.asdict(self.rope_scaling)}
        return HFLlamaConfig(
            **same_named(self, HF_SAME_NAMES),
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.dim_per_head,
            rope_parameters=rope,
            tie_word_embeddings=self.tie_word_embeddings,
            initializer_range=self.initializer_range,
            eos_token_id=self.eos_token_id,
            attention_bias=False,
            mlp_bias=False,
        )

    @classmethod
    def from_hf(cls, hf) -> LlamaConfig:
        """From a `transformers.LlamaConfig` (old `rope_scaling` or new `rope_parameters`)."""
        rope = dict(getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {})
        theta = rope.get("rope_theta", getattr(hf, "rope_theta", 10000.0))
        scaling = None
        if rope.get("rope_type", rope.get("type")) == "llama3":
            fields = {f.name for f in dataclasses.fields(RopeScaling)}
            scaling = RopeScaling(**{k: v for k, v in rope.items() if k in fields})
        elif rope.get("rope_type", "default") not in ("default", None):
            raise ValueError(f"unsupported rope type {rope.get('rope_type')!r}: default or llama3")
        return cls(
            **same_named(hf, HF_SAME_NAMES),
            num_key_value_heads=hf.num_key_value_heads or hf.num_attention_heads,
            head_dim=getattr(hf, "head_dim", None),
            rope_theta=float(theta),
            rope_scaling=scaling,
            tie_word_embeddings=bool(hf.tie_word_embeddings),
            eos_token_id=eos_from_hf(hf),
        )


def _llama3(hidden, intermediate, layers, heads, head_dim, tied, rope_factor) -> LlamaConfig:
    """A released Llama 3.x shape: 128k vocab, 8 KV heads, theta 500k, llama3 rope scaling."""
    return LlamaConfig(
        vocab_size=128256,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=8,
        head_dim=head_dim,
        tie_word_embeddings=tied,
        rope_theta=500000.0,
        rope_scaling=RopeScaling(factor=rope_factor),
        max_position_embeddings=131072,
    )


SIZES: dict[str, LlamaConfig] = {
    "tiny": LlamaConfig(),
    "1b": _llama3(2048, 8192, 16, 32, 64, tied=True, rope_factor=32.0),  # Llama 3.2 1B
    "3b": _llama3(3072, 8192, 28, 24, 128, tied=True, rope_factor=32.0),  # Llama 3.2 3B
    "8b": _llama3(4096, 14336, 32, 32, 128, tied=False, rope_factor=8.0),  # Llama 3.1 8B
    "70b": _llama3(8192, 28672, 80, 64, 128, tied=False, rope_factor=8.0),  # Llama 3.1 70B
}
