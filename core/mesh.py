"""Named SPMD device meshes from axis sizes, e.g. data=1 fsdp=-1 tensor=2.

Axis order puts the most communication-heavy axis (tensor) innermost so it maps to the
fastest ICI links; `dcn` sizes multiply axes across slices for multi-slice training.
"""

from __future__ import annotations

import dataclasses
import math

from zoo.core.errors import UserError

AXES = ("data", "fsdp", "sequence", "expert", "tensor")


class MeshError(UserError):
    """Axis sizes that cannot tile the available devices."""


@dataclasses.dataclass
class MeshConfig:
    """Sizes of the named mesh axes; -1 means "all devices left over" (at most one axis)."""

    data: int = 1
    fsdp: int = -1
    sequence: int = 1
    expert: int = 1
    tensor: int = 1
    # Multi-slice: how many slices each axis spans over the data-center network, e.g. {data: 2}.
    dcn: dict[str, int] = dataclasses.field(default_factory=dict)


def resolve_axis_sizes(config: MeshConfig, num_devices: int) -> dict[str, int]:
    """Global axis sizes (ICI x DCN) with the -1 axis filled in; checks they tile the devices."""
    unknown = sorted(set(config.dcn) - set(AXES))
    if unknown:
        raise MeshError(f"mesh.dcn has unknown axes {unknown}; valid axes: {', '.join(AXES)}")
    sizes = {axis: getattr(config, axis) for axis in AXES}
    fill = [axis for axis, size in sizes.items() if size == -1]
    bad = [axis for axis, size in sizes.items() if size == 0 or size < -1]
    if bad or len(fill) > 1:
        raise MeshError(
            f"mesh axis sizes must be positive with at most one -1 (fill), got {_fmt(sizes)}"
        )
    for axis, slices in config.dcn.items():
        sizes[axis] = sizes[axis] * slices if sizes[axis] != -1 else -1
    known = math.prod(size for size in sizes.values() if size != -1)
    if fill:
        if num_devices % known:
            raise MeshError(
                f"mesh {_fmt(sizes)} cannot fill {num_devices} devices: {known} does not divide "
                f"{num_devices}"
            )
        sizes[fill[0]] = num_devices // known
        uneven = [axis for axis, slices in config.dcn.items() if sizes[axis] % slices]
        if uneven:
            raise MeshError(
                f"mesh axis {uneven[0]} ({sizes[uneven[0]]}) is not divisible by "
                f"its dcn size {config.dcn[uneven[0]]}"
            )
    elif known != num_devices:
        raise MeshError(
            f"mesh {_fmt(sizes)} has {known} devices but the runtime has {num_devices}; "
            "make the axis sizes multiply to the device count or set one axis to -1"
        )
    return sizes


def check_divides(run, more: dict[str, dict[str, int]] | None = None) -> None:
    """Refuse, before a model is built, a mesh axis of `run` (a TrainConfig) that does not
    divide a size it splits: those its model config lists in `mesh_divides()` (axis ->
    {config key: size}, e.g. expert -> {model.num_local_experts: 8}) and `more` (the task's,
    e.g. seq_len). XLA pads an uneven split, wasting compute, or aborts (experts: SIGABRT)."""
    from zoo.core import topology

    model = getattr(run, "model", None)  # the run schema adds the family's model config
    divides = {**(model.mesh_divides() if hasattr(model, "mesh_divides") else {}), **(more or {})}
    try:
        devices = topology.parse(run.tpu).devices
        sizes = resolve_axis_sizes(run.mesh, devices)
    except UserError:
        return  # the slice or the mesh itself is refused later, in its own words
    for axis, named in divides.items():
        for key, size in named.items():
            if size % sizes[axis]:
                common = math.gcd(devices, *named.values())
                valid = [str(n) for n in range(1, common + 1) if common % n == 0]
                choices = " or ".join([", ".join(valid[:-1]), valid[-1]] if valid[1:] else valid)
                raise ValueError(f"mesh.{axis}={sizes[axis]} must divide {key} ({size}); "
                                 f"on {run.tpu} use mesh.{axis}={choices}")


def _fmt(sizes: dict[str, int]) -> str:
    return " ".join(f"{axis}={size}" for axis, size in sizes.items())


def build_mesh(config: MeshConfig):
    """An `xs.Mesh` over every device of the runtime (HybridMesh on TPU for topology order)."""
    import numpy as np
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    num_devices = xr.global_runtime_device_count()
    sizes = resolve_axis_sizes(config, num_devices)
    if xr.device_type() == "TPU":
        dcn = tuple(config.dcn.get(axis, 1) for axis in AXES)
        ici = tuple(sizes[axis] // dcn_size for axis, dcn_size in zip(AXES, dcn))
        mesh = xs.HybridMesh(
            ici_mesh_shape=ici,
            dcn_mesh_shape=dcn if math.prod(dcn) > 1 else None,
            axis_names=AXES,
        )
    else:
        if math.prod(config.dcn.values()) > 1:
            raise MeshError("mesh.dcn (multi-slice) needs a multi-slice TPU runtime")
        mesh = xs.Mesh(np.arange(num_devices), tuple(sizes[a] for a in AXES), AXES)
    xs.set_global_mesh(mesh)
    return mesh


def axis_sizes(mesh) -> dict[str, int]:
    return dict(zip(mesh.axis_names, mesh.mesh_shape))
