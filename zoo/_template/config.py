"""MyModel's architecture hyper-parameters: every field is a `model.*` key of `zoo train`."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class MyModelConfig:
    vocab_size: int = 4096  # the shipped tokenizer's size
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    mlp_ratio: int = 4
    max_seq_len: int = 2048
    initializer_range: float = 0.02
    # Token ids, filled from the tokenizer by the LM trainer.
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    def __post_init__(self):
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size ({self.hidden_size}) must be a multiple of "
                f"model.num_heads ({self.num_heads})"
            )


# `tiny` is the size the tests train; add the sizes your users need.
SIZES = {
    "tiny": MyModelConfig(),
    "small": MyModelConfig(hidden_size=768, num_layers=12, num_heads=12),
}
