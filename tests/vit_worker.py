"""ViT on XLA CPU devices, for tests/test_vit.py: on 1 device, the parity config with scan
off and on; on any count, every sharding x remat preset of zoo/vit.
Usage: python tests/vit_worker.py OUT.pt"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from xla_harness import sharded_loss_and_grads  # noqa: E402

from core import config  # noqa: E402
from core.mesh import MeshConfig  # noqa: E402
from core.remat import RematConfig  # noqa: E402
from core.sharding import ShardingRules  # noqa: E402
from zoo.vit.config import ViTConfig  # noqa: E402
from zoo.vit.family import FAMILY  # noqa: E402

CONFIG = ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=64, num_labels=5)
MESHES = {"fsdp": MeshConfig(), "fsdp_tensor": MeshConfig(tensor=2)}
REMATS = ["none", "checkpoint", "scan", "scan_checkpoint"]


def batch():
    generator = torch.Generator().manual_seed(1)
    return {"pixel_values": torch.randn(8, 3, 16, 16, generator=generator),
            "labels": torch.randint(0, 5, (8,), generator=generator)}


def remat_preset(name: str) -> RematConfig:
    return config.load(RematConfig, files=[FAMILY.preset("remat", name)])


def run(preset: str, remat: str) -> dict:
    logits = {}

    def loss_fn(model, b):
        logits["value"] = model(b["pixel_values"])
        return F.cross_entropy(logits["value"], b["labels"])

    single = xr.global_runtime_device_count() == 1
    result = sharded_loss_and_grads(
        FAMILY.build(CONFIG, seed=0), loss_fn, batch(),
        ShardingRules.from_yaml(FAMILY.preset("sharding", preset)), remat_preset(remat),
        MeshConfig() if single else MESHES[preset])
    result["logits"] = logits["value"].detach().cpu()
    return result


def main(out: str):
    xr.use_spmd()
    results = {(p, r): run(p, r) for p in MESHES for r in REMATS}
    torch.save({"devices": xr.global_runtime_device_count(), "results": results}, out)


if __name__ == "__main__":
    main(sys.argv[1])
