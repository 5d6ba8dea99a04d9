"""Qwen3 (dense) configuration: the decoder's fields (zoo/common/decoder_config.py), Qwen3's
defaults and published shapes; convertible to and from Hugging Face `Qwen3Config`."""

from __future__ import annotations

import dataclasses

from core.config import same_named
from zoo.common.decoder_config import HF_SAME_NAMES as DECODER_SAME_NAMES
from zoo.common.decoder_config import DecoderConfig, qwen3_fields_from_hf


@dataclasses.dataclass
class Qwen3Config(DecoderConfig):
    head_dim: int | None = 64  # Qwen3 sets it apart from hidden / heads (128 at every size)
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    tie_word_embeddings: bool = True

    def to_hf(self):
        from transformers import Qwen3Config as HFQwen3Config  # transformers

        return HFQwen3Config(
            **same_named(self, HF_SAME_NAMES),
            head_dim=self.dim_per_head,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            tie_word_embeddings=self.tie_word_embeddings,
            initializer_range=self.initializer_range,
            eos_token_id=self.eos_token_id,
            attention_bias=False,
            use_sliding_window=False,
        )

    @classmethod
    def from_hf(cls, hf) -> Qwen3Config:
        """From a `transformers.Qwen3Config` (`qwen3_fields_from_hf`)."""
        return cls(**same_named(hf, HF_SAME_NAMES), **qwen3_fields_from_hf(hf))


HF_SAME_NAMES = (*DECODER_SAME_NAMES, "num_key_value_heads")


def _qwen3(hidden, intermediate, layers, heads, tied) -> Qwen3Config:
    """A released Qwen3 shape (Qwen/Qwen3-*): 152k vocab, 8 KV heads of 128, theta 1e6,
    40k positions; the chat models' end of turn <|im_end|> as EOS."""
    return Qwen3Config(vocab_size=151936, hidden_size=hidden, intermediate_size=intermediate,
                       num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                       tie_word_embeddings=tied, bos_token_id=151643, eos_token_id=151645)


SIZES: dict[str, Qwen3Config] = {
    "tiny": Qwen3Config(),
    "0.6b": _qwen3(1024, 3072, 28, 16, tied=True),
    "1.7b": _qwen3(2048, 6144, 28, 16, tied=True),
    "4b": _qwen3(2560, 9728, 36, 32, tied=True),
    "8b": _qwen3(4096, 12288, 36, 32, tied=False),
    "14b": _qwen3(5120, 17408, 40, 40, tied=False),
    "32b": _qwen3(5120, 25600, 64, 64, tied=False),
}
