"""T5 v1.1 configuration, convertible to and from Hugging Face `T5Config`."""

from __future__ import annotations

import dataclasses

from core.config import check_sizes, same_named


@dataclasses.dataclass
class T5Config:
    vocab_size: int = 4096  # the shipped tokenizer's size
    d_model: int = 128
    d_kv: int = 32
    d_ff: int = 256
    num_layers: int = 2  # encoder blocks
    num_decoder_layers: int = 2
    num_heads: int = 4
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    initializer_factor: float = 1.0
    # T5 starts decoding from the pad token; ids are filled from the tokenizer.
    pad_token_id: int = 0
    eos_token_id: int = 1
    bos_token_id: int | None = None

    def __post_init__(self):
        check_sizes(self, counts=("vocab_size", "d_model", "d_kv", "d_ff", "num_layers",
                                  "num_decoder_layers", "num_heads",
                                  "relative_attention_num_buckets",
                                  "relative_attention_max_distance"),
                    positive=("layer_norm_epsilon",))

    @property
    def decoder_start_token_id(self) -> int:
        return self.pad_token_id

    def mesh_divides(self) -> dict[str, dict[str, int]]:
        """Mesh axis -> the sizes it splits under this family's presets, which it must divide."""
        return {"tensor": {"model.num_heads": self.num_heads, "model.d_ff": self.d_ff}}

    def to_hf(self):
        """The equivalent `transformers.T5Config` (gated-GELU, untied head: T5 v1.1)."""
        from transformers import T5Config as HFT5Config  # transformers

        return HFT5Config(
            **same_named(self, HF_SAME_NAMES),
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
            dropout_rate=0.0,
            decoder_start_token_id=self.decoder_start_token_id,
        )

    @classmethod
    def from_hf(cls, hf) -> T5Config:
        # transformers 5 marks v1.1's untied head by not scaling the decoder output
        v1_1 = not getattr(hf, "scale_decoder_outputs", hf.tie_word_embeddings)
        if getattr(hf, "feed_forward_proj", "") != "gated-gelu" or not v1_1:
            raise ValueError(
                "only T5 v1.1 style checkpoints (gated-gelu, untied LM head) are supported"
            )
        return cls(**same_named(hf, HF_SAME_NAMES))


# Every field but bos_token_id has the same name and meaning in transformers' T5Config.
HF_SAME_NAMES = tuple(f.name for f in dataclasses.fields(T5Config) if f.name != "bos_token_id")


def _v1_1(d_model: int, d_ff: int, layers: int, heads: int) -> T5Config:
    """google/t5-v1_1-* shapes (32,128-token SentencePiece vocabulary)."""
    return T5Config(vocab_size=32128, d_model=d_model, d_kv=64, d_ff=d_ff, num_layers=layers,
                    num_decoder_layers=layers, num_heads=heads)


SIZES = {
    "tiny": T5Config(),
    "small": _v1_1(512, 1024, 8, 6),
    "base": _v1_1(768, 2048, 12, 12),
    "large": _v1_1(1024, 2816, 24, 16),
    "xl": _v1_1(2048, 5120, 24, 32),
}
