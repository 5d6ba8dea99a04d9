"""ViT configuration, convertible to and from Hugging Face `ViTConfig`."""

from __future__ import annotations

import dataclasses

from core.config import check_sizes, same_named


@dataclasses.dataclass
class ViTConfig:
    image_size: int = 32
    patch_size: int = 4
    num_channels: int = 3
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 512
    layer_norm_eps: float = 1e-12
    num_labels: int = 6
    # Class names (index = label id); filled from the training data, exported as id2label.
    labels: list[str] = dataclasses.field(default_factory=list)
    initializer_range: float = 0.02

    def __post_init__(self):
        check_sizes(self, counts=("image_size", "patch_size", "num_channels", "hidden_size",
                                  "num_hidden_layers", "num_attention_heads",
                                  "intermediate_size", "num_labels"),
                    positive=("layer_norm_eps",))
        if self.image_size % self.patch_size:
            raise ValueError(
                f"model.image_size ({self.image_size}) must be a multiple of "
                f"model.patch_size ({self.patch_size})"
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"model.hidden_size ({self.hidden_size}) must be a multiple of "
                f"model.num_attention_heads ({self.num_attention_heads})"
            )

    def mesh_divides(self) -> dict[str, dict[str, int]]:
        """Mesh axis -> the sizes it splits under this family's presets, which it must divide."""
        return {"tensor": {"model.num_attention_heads": self.num_attention_heads,
                           "model.intermediate_size": self.intermediate_size}}

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    def to_hf(self):
        """The equivalent `transformers.ViTConfig` (for export and parity tests)."""
        from transformers import ViTConfig as HFViTConfig  # transformers

        names = self.labels or [f"LABEL_{i}" for i in range(self.num_labels)]
        return HFViTConfig(
            **same_named(self, HF_SAME_NAMES),
            hidden_act="gelu",
            qkv_bias=True,
            id2label=dict(enumerate(names)),
            label2id={name: i for i, name in enumerate(names)},
        )

    @classmethod
    def from_hf(cls, hf) -> ViTConfig:
        if getattr(hf, "hidden_act", "gelu") != "gelu" or not getattr(hf, "qkv_bias", True):
            raise ValueError("only ViTs with exact GELU and qkv biases are supported")
        labels = [hf.id2label[i] for i in range(hf.num_labels)] if hf.id2label else []
        return cls(
            **same_named(hf, HF_SAME_NAMES),
            num_labels=hf.num_labels,
            labels=[] if all(n.startswith("LABEL_") for n in labels) else labels,
        )


# Fields with the same name and meaning in transformers' ViTConfig (labels travel as id2label).
HF_SAME_NAMES = tuple(
    f.name for f in dataclasses.fields(ViTConfig) if f.name not in ("labels", "num_labels")
)


def _imagenet(hidden: int, layers: int, heads: int, patch: int) -> ViTConfig:
    """An ImageNet-1k classifier at 224 px with the usual 4x MLP."""
    return ViTConfig(
        image_size=224,
        patch_size=patch,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        num_labels=1000,
    )


SIZES = {
    "tiny": ViTConfig(),
    "b16": _imagenet(768, 12, 12, 16),
    "l16": _imagenet(1024, 24, 16, 16),
    "h14": _imagenet(1280, 32, 16, 14),
    "10b": _imagenet(5120, 32, 32, 14),
}
