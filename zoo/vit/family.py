"""Registry entry for the ViT family."""

from pathlib import Path

from core.decoder_shape import DecoderShape
from core.memory import decoder_stack_activation_bytes
from core.task import RunConfig
from zoo.registry import ModelFamily
from zoo.tasks.image_classification import IMAGE_CLASSIFICATION
from zoo.vit.config import SIZES, ViTConfig
from zoo.vit.hf import config_from_hf, load_hf
from zoo.vit.model import ViTForImageClassification


def forward_flops(run: RunConfig, causal: bool = True) -> float:
    """Forward matmul FLOPs per image. Attention is over all patches + the class token in
    both directions, so `causal` changes nothing (no half-matrix convention applies)."""
    c = run.model
    tokens = c.num_patches + 1
    patch_embed = c.num_patches * c.num_channels * c.patch_size**2 * c.hidden_size
    per_layer = tokens * (4 * c.hidden_size**2 + 2 * c.hidden_size * c.intermediate_size)
    attention = 2 * tokens * tokens * c.hidden_size  # scores and values
    classifier = c.hidden_size * c.num_labels
    return 2.0 * (patch_embed + c.num_hidden_layers * (per_layer + attention) + classifier)


def activation_bytes(run: RunConfig, batch_per_device: int, tensor: int, remat: str | None,
                     bytes_per_value: int, on_tpu: bool) -> dict[str, float]:
    """The decoder-layer estimate (core/memory.py) over patches + class token; the "logits"
    term then over-counts (every token instead of the class token), which is negligible."""
    c = run.model
    shape = DecoderShape(layers=c.num_hidden_layers, hidden=c.hidden_size,
                         heads=c.num_attention_heads, vocab=c.num_labels)
    return decoder_stack_activation_bytes(
        shape, seq=c.num_patches + 1, batch=batch_per_device, tensor=tensor, remat=remat,
        bytes_per_value=bytes_per_value, flash=False)


FAMILY = ModelFamily(
    name="vit",
    config_cls=ViTConfig,
    sizes=SIZES,
    model_cls=ViTForImageClassification,
    task=IMAGE_CLASSIFICATION,
    presets_dir=Path(__file__).parent,
    layer_classes=("ViTLayer",),
    layer_stacks=("vit.layers",),
    without_presets=("remat/scan_offload", "remat/scan_save_qkv_proj"),
    forward_flops=forward_flops,
    activation_bytes=activation_bytes,
    hf_class="ViTForImageClassification",
    hf_config=ViTConfig.to_hf,
    config_from_hf=config_from_hf,
    load_hf=load_hf,
)
