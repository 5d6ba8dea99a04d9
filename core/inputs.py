"""Getting batches onto the mesh: each host loads only its share, the batch dim is split
over the data-parallel axes (data x fsdp x expert), a sequence dim over `sequence`, every
other dim is replicated."""

from __future__ import annotations

import math

from zoo.core.errors import UserError

# The expert axis splits the batch too: outside a mixture of experts it is data parallel,
# and inside one the partitioner moves tokens between it and the experts (all-to-all).
BATCH_AXES = ("data", "fsdp", "expert")
SEQUENCE_AXIS = "sequence"  # splits a [batch, sequence] input's sequence (context parallel)


def batch_devices(axis_sizes: dict[str, int]) -> int:
    """How many ways the batch is split on a mesh of these axis sizes."""
    return math.prod(axis_sizes[axis] for axis in BATCH_AXES)


def host_batch_size(global_batch_size: int, process_count: int) -> int:
    """Examples this host loads per step (its share of the global batch)."""
    if global_batch_size % process_count:
        raise UserError(
            f"global batch size {global_batch_size} does not split over "
            f"{process_count} hosts; use a multiple of {process_count}"
        )
    return global_batch_size // process_count


def batch_spec(shape, mesh_axes: dict[str, int]) -> tuple:
    """The batch dim over the batch axes. A [batch, sequence] tensor (tokens, masks, labels)
    also has its sequence split over the `sequence` axis when that axis has more than one
    device (context parallelism): each device then receives its slice of every sequence.
    The mesh's other size-1 axes join the batch dim there, because torch_xla 2.9's input
    sharding fails on a 2-D split that leaves mesh axes unused (IndexError)."""
    if len(shape) == 2 and shape[1] > 1 and mesh_axes.get(SEQUENCE_AXIS, 1) > 1:
        spare = tuple(a for a, n in mesh_axes.items()
                      if n == 1 and a not in BATCH_AXES and a != SEQUENCE_AXIS)
        return (BATCH_AXES + spare, SEQUENCE_AXIS)
    return (BATCH_AXES,) + (None,) * (len(shape) - 1)


def batch_shardings(mesh, example: dict) -> dict:
    """Per-key `ShardingSpec`s for `MpDeviceLoader(input_sharding=...)`."""
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    from zoo.core.mesh import axis_sizes

    return {
        key: xs.ShardingSpec(
            mesh, batch_spec(value.shape, axis_sizes(mesh)), minibatch=xr.process_count() > 1
        )
        for key, value in example.items()
    }


def device_loader(loader, mesh, example: dict):
    """Wrap a host data loader so its batches arrive on the XLA device already sharded.

    torch_xla 2.9 cannot send 1-D tensors with an input sharding (IndexError in
    `_xla_tensors_from_aten`), so per-example vectors (labels, masks) travel as [B, 1] and
    are squeezed back on the device."""
    import torch_xla
    import torch_xla.distributed.parallel_loader as pl

    vectors = {key for key, value in example.items() if value.dim() == 1}
    columns = ({k: v[:, None] if k in vectors else v for k, v in b.items()} for b in loader)
    example = {k: v[:, None] if k in vectors else v for k, v in example.items()}
    sharded = pl.MpDeviceLoader(
        columns, torch_xla.device(), input_sharding=batch_shardings(mesh, example)
    )
    for batch in sharded:
        yield {k: v[:, 0] if k in vectors else v for k, v in batch.items()}


def shard_batch(batch: dict, mesh) -> dict:
    """Move a (single-host) batch of tensors to the device, split as the loader splits it."""
    import torch_xla
    import torch_xla.distributed.spmd as xs

    from zoo.core.mesh import axis_sizes

    out = {}
    for key, value in batch.items():
        value = value.to(torch_xla.device())
        xs.mark_sharding(value, mesh, batch_spec(value.shape, axis_sizes(mesh)))
        out[key] = value
    return out
