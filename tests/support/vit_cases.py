"""The ViT configuration and batch that tests/multidevice/test_vit_presets.py and
tests/support/preset_worker.py share."""

import torch
import torch.nn.functional as F

from core.mesh import MeshConfig
from zoo.vit.config import ViTConfig
from zoo.vit.family import FAMILY  # noqa: F401 (the worker reads it)

CONFIG = ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=64, num_labels=5)
PARITY_CONFIGS = {"vit": CONFIG}
MESHES = {"fsdp": MeshConfig(), "fsdp_tensor": MeshConfig(tensor=2)}
REMATS = ["none", "checkpoint", "scan", "scan_checkpoint"]
# by default (the rest are slow): unrolled, scanned, and fsdp_tensor with a remat barrier
DEFAULT_PRESETS = [("fsdp", "none"), ("fsdp", "scan"), ("fsdp_tensor", "checkpoint")]


def batch():
    generator = torch.Generator().manual_seed(1)
    return {"pixel_values": torch.randn(8, 3, 16, 16, generator=generator),
            "labels": torch.randint(0, 5, (8,), generator=generator)}


def forward(model, b):
    logits = model(b["pixel_values"])
    return F.cross_entropy(logits, b["labels"]), logits
