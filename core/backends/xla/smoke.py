"""A real end-to-end check of the SPMD stack: shard a matmul over the mesh, compile, run,
and compare with the same product computed on the host."""

from __future__ import annotations

import dataclasses
import time

import torch

from core.mesh import MeshConfig, axis_sizes


@dataclasses.dataclass
class DoctorConfig:
    """What `zoo doctor` accepts as overrides: the mesh to check."""

    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)


@dataclasses.dataclass
class SmokeResult:
    ok: bool
    shape: str
    max_abs_error: float
    seconds: float
    output_sharding: str
    shards: int


def sharded_matmul(mesh, rows_per_device: int = 32, k: int = 256, n: int = 128) -> SmokeResult:
    """x[(data,fsdp), -] @ w[-, tensor]; the partitioner must all-gather nothing and split y."""
    import torch_xla  # torch_xla
    import torch_xla.distributed.spmd as xs  # torch_xla
    from torch_xla.distributed.spmd.xla_sharding import wrap_as_sharded_tensor  # torch_xla

    devices = int(mesh.size())
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows_per_device * devices, k, generator=generator)
    w = torch.randn(k, n * axis_sizes(mesh)["tensor"], generator=generator)
    start = time.perf_counter()
    x_dev, w_dev = x.to(torch_xla.device()), w.to(torch_xla.device())
    xs.mark_sharding(x_dev, mesh, (("data", "fsdp"), None))
    xs.mark_sharding(w_dev, mesh, (None, "tensor"))
    y_dev = x_dev @ w_dev
    torch_xla.sync()
    y = y_dev.cpu()
    seconds = time.perf_counter() - start
    error = (y - x @ w).abs().max().item()
    scale = (x @ w).abs().max().item()
    shards = len(wrap_as_sharded_tensor(y_dev).local_shards)
    return SmokeResult(
        ok=error <= 1e-4 * scale and shards == devices,
        shape=f"[{x.shape[0]}x{k}] @ [{k}x{w.shape[1]}]",
        max_abs_error=error,
        seconds=seconds,
        output_sharding=torch_xla._XLAC._get_xla_sharding_spec(y_dev),
        shards=shards,
    )
