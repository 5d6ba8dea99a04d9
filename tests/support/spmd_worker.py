"""Runs the toy model's forward+backward under every sharding x remat preset on however many
XLA CPU devices this process was started with (CPU_NUM_DEVICES), and saves the results for
tests/multidevice/test_spmd.py.
Usage (from the repo root): python -m tests.support.spmd_worker OUT.pt
"""

import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402

from core.backends.xla.spmd import build_mesh, device_loader  # noqa: E402
from core.mesh import MeshConfig  # noqa: E402
from core.remat import RematConfig  # noqa: E402
from core.sharding import ShardingRules  # noqa: E402
from tests.support.paths import DATA  # noqa: E402
from tests.support.toy_model import SEQ, VOCAB, ToyModel  # noqa: E402
from tests.support.xla_harness import sharded_loss_and_grads  # noqa: E402

PRESETS = {
    "fsdp": (MeshConfig(), "toy_fsdp.yaml"),
    "fsdp_tensor": (MeshConfig(tensor=2), "toy_fsdp_tensor.yaml"),
}
REMATS = {
    "none": RematConfig(),
    "checkpoint": RematConfig(checkpoint=["Block"]),
    "scan": RematConfig(scan=["layers"]),
    "scan_checkpoint": RematConfig(checkpoint=["Block"], scan=["layers"]),
    "scan_minimal": RematConfig(checkpoint=["Block"], scan=["layers"], policy="minimal"),
}


def batch():
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (8, SEQ), generator=generator)
    return {"input_ids": ids, "labels": torch.roll(ids, -1, dims=1)}


def run(preset: str, remat: str) -> dict:
    mesh_config, rules_file = PRESETS[preset]
    torch.manual_seed(0)
    return sharded_loss_and_grads(
        ToyModel(),
        lambda model, b: model(b["input_ids"], b["labels"]),
        batch(),
        ShardingRules.from_yaml(DATA / rules_file),
        REMATS[remat],
        mesh_config,
    )


def loader_batches() -> list[dict]:
    """Batches from a host DataLoader through the sharded device loader."""
    mesh = build_mesh(MeshConfig())
    examples = [{"input_ids": row, "mask": torch.ones(SEQ, 2)} for row in batch()["input_ids"]]
    loader = torch.utils.data.DataLoader(examples, batch_size=4)
    return [
        {k: (v.cpu(), torch_xla._XLAC._get_xla_sharding_spec(v)) for k, v in b.items()}
        for b in device_loader(loader, mesh, next(iter(loader)))
    ]


def main(out: str):
    xr.use_spmd()
    # one device is the reference: the fsdp preset alone (tensor=2 needs 2 devices)
    presets = PRESETS if xr.global_runtime_device_count() > 1 else ["fsdp"]
    results = {(p, r): run(p, r) for p in presets for r in REMATS}
    torch.save(
        {
            "devices": xr.global_runtime_device_count(),
            "results": results,
            "loader": loader_batches(),
            "host_ids": batch()["input_ids"],
        },
        out,
    )


if __name__ == "__main__":
    main(sys.argv[1])
