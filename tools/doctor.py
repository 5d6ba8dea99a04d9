"""`zoo doctor`: what this machine runs on, then a sharded matmul over every device, checked
against the host's product."""

from __future__ import annotations

from core import config
from core.backends.xla.runtime import detect
from core.backends.xla.smoke import DoctorConfig, sharded_matmul
from core.backends.xla.spmd import build_mesh
from core.mesh import axis_sizes


def doctor(overrides: list[str]) -> tuple[str, bool]:
    """The report's lines and whether the smoke check passed."""
    cfg = config.load(DoctorConfig, overrides=overrides)
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
    mesh = build_mesh(cfg.mesh)
    rows.append(("mesh", " ".join(f"{a}={s}" for a, s in axis_sizes(mesh).items())))
    lines = [f"{key:12} {value}" for key, value in rows]
    result = sharded_matmul(mesh)
    verdict = "ok" if result.ok else "FAILED"
    lines.append(
        f"{'smoke check':12} sharded matmul {result.shape} over {result.shards} shards: "
        f"{verdict} (max abs error {result.max_abs_error:.1e}, "
        f"compile+run {result.seconds:.2f} s, output sharding {result.output_sharding})")
    return "\n".join(lines), result.ok
