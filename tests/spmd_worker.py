"""Runs the toy model's forward+backward under every sharding x remat preset on however many
XLA CPU devices this process was started with (CPU_NUM_DEVICES), and saves loss, gradients,
sharding specs and per-device shard shapes for the tests to compare across device counts.

Device count is fixed per process by the PJRT runtime, hence one process per count.
Usage: python tests/spmd_worker.py OUT.pt
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from torch_xla.distributed.spmd.xla_sharding import wrap_as_sharded_tensor  # noqa: E402
from toy_model import SEQ, VOCAB, ToyModel  # noqa: E402

from core.inputs import device_loader, shard_batch  # noqa: E402
from core.mesh import MeshConfig, build_mesh  # noqa: E402
from core.remat import RematConfig, apply_remat  # noqa: E402
from core.sharding import ShardingRules, shard_model  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
PRESETS = {
    "fsdp": (MeshConfig(), "toy_fsdp.yaml"),
    "fsdp_tensor": (MeshConfig(tensor=2), "toy_fsdp_tensor.yaml"),
}
REMATS = {
    "none": RematConfig(),
    "checkpoint": RematConfig(checkpoint=["Block"]),
    "scan": RematConfig(scan=["layers"]),
    "scan_checkpoint": RematConfig(checkpoint=["Block"], scan=["layers"]),
}


def batch():
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (8, SEQ), generator=generator)
    return ids, torch.roll(ids, -1, dims=1)


def run(preset: str, remat: str) -> dict:
    mesh_config, rules_file = PRESETS[preset]
    if xr.global_runtime_device_count() == 1:
        mesh_config = MeshConfig()
    mesh = build_mesh(mesh_config)
    torch.manual_seed(0)
    model = ToyModel().to(torch_xla.device())
    apply_remat(model, REMATS[remat])
    plan = shard_model(model, ShardingRules.from_yaml(DATA / rules_file), mesh)
    ids, labels = batch()
    inputs = shard_batch({"input_ids": ids, "labels": labels}, mesh)
    loss = model(inputs["input_ids"], inputs["labels"])
    loss.backward()
    params = dict(model.named_parameters())
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([p.grad for p in params.values()])
    torch_xla.sync()
    return {
        "loss": loss.cpu(),
        "grads": {n: p.grad.cpu() for n, p in params.items()},
        "specs": {n: torch_xla._XLAC._get_xla_sharding_spec(p) for n, p in params.items()},
        "hlo_has_scan": "while" in hlo,  # scan lowers to an XLA while loop
        "hlo_has_remat": "opt-barrier" in hlo,  # torch_xla checkpoint fences its recompute
        "planned_shards": {e.name: e.shard_shape for e in plan},
        "actual_shards": {
            n: {tuple(s.data.shape) for s in p.local_shards}
            for n, p in ((n, wrap_as_sharded_tensor(p)) for n, p in params.items())
        },
    }


def loader_batches() -> list[dict]:
    """Batches from a host DataLoader through the sharded device loader."""
    mesh = build_mesh(MeshConfig())
    ids, _ = batch()
    examples = [{"input_ids": row, "mask": torch.ones(SEQ, 2)} for row in ids]
    loader = torch.utils.data.DataLoader(examples, batch_size=4)
    out = []
    for device_batch in device_loader(loader, mesh, next(iter(loader))):
        out.append(
            {
                k: (v.cpu(), torch_xla._XLAC._get_xla_sharding_spec(v))
                for k, v in device_batch.items()
            }
        )
    return out


def main(out: str):
    xr.use_spmd()
    results = {(p, r): run(p, r) for p in PRESETS for r in REMATS}
    torch.save(
        {
            "devices": xr.global_runtime_device_count(),
            "results": results,
            "loader": loader_batches(),
            "host_ids": batch()[0],
        },
        out,
    )


if __name__ == "__main__":
    main(sys.argv[1])
