"""Llama 3 style decoder configuration, convertible to and from Hugging Face `LlamaConfig`."""

from __future__ import annotations

import dataclasses

from core.config import check_sizes, same_named


@dataclasses.dataclass
class RopeScaling:
    """Llama 3.1 frequency-dependent RoPE scaling (HF rope_type "llama3")."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclasses.dataclass
class LlamaConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int | None = None  # default hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: RopeScaling | None = None
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    # "auto": Pallas flash attention on TPU, plain softmax attention elsewhere or when the
    # sequence is split over devices (the kernel splits batch and heads only), decided when
    # the run is built (family.for_slice); a model built from "auto" directly runs plain.
    attention: str = "auto"
    # Positions per sequence whose logits the training loss holds at once: a longer
    # sequence's loss runs in chunks, each recomputed in backward. 0 (default): never chunk.
    # Off because it did not pay where measured: llama-8b on v5p-128 at 128 x 8192 went from
    # 19.4 to 26.1 GiB per chip (each chunk all-reduces a whole LM-head gradient).
    loss_chunk_tokens: int = 0
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    def __post_init__(self):
        check_sizes(self, counts=("vocab_size", "hidden_size", "intermediate_size",
                                  "num_hidden_layers", "num_attention_heads",
                                  "num_key_value_heads", "head_dim", "max_position_embeddings"),
                    positive=("rms_norm_eps", "rope_theta"))
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"model.num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"model.num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.loss_chunk_tokens < 0:
            raise ValueError(f"model.loss_chunk_tokens must be >= 0, not {self.loss_chunk_tokens}")
        if self.attention not in ("auto", "plain", "flash"):
            raise ValueError(f"model.attention must be auto, plain or flash, not {self.attention}")

    def mesh_divides(self) -> dict[str, dict[str, int]]:
        """Mesh axis -> the sizes it splits under this family's presets, which it must divide."""
        return {"tensor": {"model.num_attention_heads": self.num_attention_heads,
                           "model.num_key_value_heads": self.num_key_value_heads,
                           "model.intermediate_size": self.intermediate_size}}

    def uses_flash(self, on_tpu: bool, sequence_split: bool = False) -> bool:
        """Whether attention runs the Pallas flash kernel (`auto`: on a TPU, unless the
        sequence is split over devices)."""
        return self.attention == "flash" or (
            self.attention == "auto" and on_tpu and not sequence_split)

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

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
        eos = hf.eos_token_id[0] if isinstance(hf.eos_token_id, list) else hf.eos_token_id
        return cls(
            **same_named(hf, HF_SAME_NAMES),
            num_key_value_heads=hf.num_key_value_heads or hf.num_attention_heads,
            head_dim=getattr(hf, "head_dim", None),
            rope_theta=float(theta),
            rope_scaling=scaling,
            tie_word_embeddings=bool(hf.tie_word_embeddings),
            eos_token_id=eos,
        )


# Fields with the same name and meaning in transformers' LlamaConfig; the rest are converted.
HF_SAME_NAMES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                 "num_attention_heads", "rms_norm_eps", "max_position_embeddings",
                 "bos_token_id", "pad_token_id")


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
