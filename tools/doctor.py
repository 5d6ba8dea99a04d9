"""`zoo doctor`: what this machine runs on, then a sharded matmul over every device, checked
against the host's product."""

from __future__ import annotations

import math

from core import config, topology
from core.backends.xla.runtime import detect
from core.backends.xla.smoke import DoctorConfig, sharded_matmul
from core.backends.xla.spmd import build_mesh
from core.mesh import AXES, MeshError, axis_sizes
from zoo.app.train import select_runtime


def doctor(overrides: list[str], tpu: str | None = None) -> tuple[str, bool]:
    """The report's lines and whether the smoke check passed; `tpu` is `zoo train --tpu`'s
    slice type, resolved and selected as `zoo train` does (cpu-N: N virtual devices here)."""
    cfg = config.load(DoctorConfig, overrides=overrides)
    if tpu:
        select_runtime(topology.parse(tpu))
    info = detect()
    rows = [
        ("torch", info.torch),
        ("torch_xla", info.torch_xla),
        ("jax", info.jax),
        ("torchax", info.torchax),
        ("PJRT device", f"{info.pjrt_device}, {info.device_count} devices"),
        ("processes", f"{info.process_index + 1} of {info.process_count}"),
        ("TPU type", info.tpu_type or "none detected"),
    ]
    try:
        mesh = build_mesh(cfg.mesh)
    except MeshError as error:
        raise MeshError(f"{error}; {_mesh_hint(cfg.mesh, info)}") from None
    rows.append(("mesh", " ".join(f"{a}={s}" for a, s in axis_sizes(mesh).items())))
    lines = [f"{key:12} {value}" for key, value in rows]
    result = sharded_matmul(mesh)
    verdict = "ok" if result.ok else "FAILED"
    lines.append(
        f"{'smoke check':12} sharded matmul {result.shape} over {result.shards} shards: "
        f"{verdict} (max abs error {result.max_abs_error:.1e}, "
        f"compile+run {result.seconds:.2f} s, output sharding {result.output_sharding})")
    return "\n".join(lines), result.ok


def _mesh_hint(mesh, info) -> str:
    """How to fix a mesh the devices cannot hold: other sizes, or (on the CPU) as many
    virtual devices as the mesh asks for."""
    hint = f"use axis sizes that fit the {info.device_count} devices"
    fixed = math.prod(size for size in (getattr(mesh, axis) for axis in AXES) if size > 0)
    if info.pjrt_device == "CPU" and fixed > 1:
        hint += f", or check this mesh on {fixed} CPU devices: zoo doctor --tpu cpu-{fixed}"
    return hint
