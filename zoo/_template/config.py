"""MyModel's architecture hyper-parameters: every field is a `model.*` key of `zoo train`."""

from __future__ import annotations

import dataclasses

from core.config import check_sizes


@dataclasses.dataclass
class MyModelConfig:
    vocab_size: int = 4096  # the shipped tokenizer's size
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    mlp_ratio: int = 4
    max_position_embeddings: int = 2048  # longest sequence: seq_len and generation
    initializer_range: float = 0.02
    # Token ids, filled from the tokenizer by the LM trainer.
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    def __post_init__(self):
        check_sizes(self, counts=("vocab_size", "hidden_size", "num_layers", "num_heads",
                                  "mlp_ratio", "max_position_embeddings"))
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size ({self.hidden_size}) must be a multiple of "
                f"model.num_heads ({self.num_heads})"
            )

    def mesh_divides(self) -> dict[str, dict[str, int]]:
        """Mesh axis -> the sizes it splits under this family's presets, which it must divide
        (checked before a model is built)."""
        mlp_width = self.hidden_size * self.mlp_ratio
        return {"tensor": {"model.num_heads": self.num_heads, "MLP width": mlp_width}}


# `tiny` is the size the tests train; add the sizes your users need.
SIZES = {
    "tiny": MyModelConfig(),
    "small": MyModelConfig(hidden_size=768, num_layers=12, num_heads=12),
}
