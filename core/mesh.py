"""Named SPMD device meshes from axis sizes, e.g. data=1 fsdp=-1 tensor=2.

Axis order puts the most communication-heavy axis (tensor) innermost so it maps to the
fastest ICI links; `dcn` sizes multiply axes across slices for multi-slice training.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np

from core import topology
from core.errors import UserError

AXES = ("data", "fsdp", "sequence", "expert", "tensor")
# The axes a batch is split over. The expert axis splits it too: outside a mixture of
# experts it is data parallel, and inside one the partitioner moves tokens between it and
# the experts (all-to-all).
BATCH_AXES = ("data", "fsdp", "expert")
# Logical axes: roles a sharding preset names instead of the mesh axes that play them,
# defined here once (as MaxText's logical axis rules). `batch`: an activation's batch dim,
# split as the inputs' is (core/inputs.py); `batch_beside_experts`: the tokens' batch
# inside a mixture of experts, where `expert` splits the experts dim instead.
LOGICAL_AXES = {"batch": BATCH_AXES, "batch_beside_experts": ("data", "fsdp")}


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


# Axes whose collectives run inside every layer (weight gathers, activation exchanges): over
# the data-center network, at ~1/50 of ICI's bandwidth per chip, they would stall each layer.
PER_LAYER_AXES = ("sequence", "expert", "tensor")


def for_slices(config: MeshConfig, topo) -> MeshConfig:
    """The mesh with its DCN degrees made to fit the job's slices. On S slices with none
    given: data parallel across them (`{data: S}`), so one gradient reduction per step is
    all that crosses the data-center network. On a TPU the DCN degrees multiply to the
    slice count; on XLA:CPU they simulate slices (contiguous groups of the virtual devices,
    as `2xcpu-4` does). Axes whose collectives run every layer are refused on DCN; FSDP
    there (a weight gather per layer per step) is allowed but logged."""
    dcn = dict(config.dcn) or ({"data": topo.slices} if topo.slices > 1 else {})
    slices = math.prod(dcn.values())
    # a CPU topology of one slice lets mesh.dcn simulate any number
    if (topo.is_tpu or topo.slices > 1) and slices != topo.slices:
        hint = (f"--tpu {slices}x{topo.slice_name}" if topo.slices == 1
                else f"DCN degrees that multiply to {topo.slices}, e.g. mesh.dcn.data="
                     f"{topo.slices}")
        raise MeshError(f"mesh.dcn spans {slices} slice(s) but --tpu {topo.name} has "
                        f"{topo.slices}; use {hint}")
    if topo.devices % slices:
        raise MeshError(f"mesh.dcn spans {slices} slices, which do not split the "
                        f"{topo.devices} devices of {topo.name} evenly")
    per_layer = [axis for axis in PER_LAYER_AXES if dcn.get(axis, 1) > 1]
    if per_layer:
        raise MeshError(f"mesh.dcn.{per_layer[0]}={dcn[per_layer[0]]} puts a collective of "
                        f"every layer on the data-center network; keep {per_layer[0]} inside "
                        f"a slice and split data (or fsdp) across slices")
    if dcn.get("fsdp", 1) > 1:
        logging.getLogger(__name__).warning(
            "mesh.dcn.fsdp=%d: every layer's weights are gathered across slices each step "
            "(data-center network); mesh.dcn.data keeps that traffic to one gradient "
            "reduction", dcn["fsdp"])
    return dataclasses.replace(config, dcn=dcn)


def slice_major_device_ids(sizes: dict[str, int], dcn: dict[str, int]):
    """Device ids in mesh order when devices [s*P, (s+1)*P) form slice s: within every
    axis the DCN index varies slowest, so an axis split over slices crosses between them
    only at its DCN degree (the layout torch_xla's HybridMesh and JAX's hybrid mesh give a
    TPU's slices)."""
    dcn_shape = [dcn.get(axis, 1) for axis in AXES]
    ici_shape = [sizes[axis] // d for axis, d in zip(AXES, dcn_shape)]
    ids = np.arange(math.prod(sizes.values())).reshape(*dcn_shape, *ici_shape)
    interleaved = [x for axis in range(len(AXES)) for x in (axis, len(AXES) + axis)]
    return ids.transpose(interleaved).reshape([sizes[axis] for axis in AXES])


def _fmt(sizes: dict[str, int]) -> str:
    return " ".join(f"{axis}={size}" for axis, size in sizes.items())


def axis_sizes(mesh) -> dict[str, int]:
    return dict(zip(mesh.axis_names, mesh.mesh_shape))
