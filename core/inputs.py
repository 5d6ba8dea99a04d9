"""Getting batches onto the mesh: each host loads only its share, the batch dim is split
over the data-parallel axes (data x fsdp x expert), a sequence dim over `sequence`, every
other dim is replicated."""

from __future__ import annotations

import math

from core.errors import UserError
from core.mesh import BATCH_AXES

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


