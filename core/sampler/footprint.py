"""How much of each device a sampler's KV cache and weights take, from its layout, shape and
parameter plan alone (no tensor made): what the plans (`zoo plan`, `zoo train`'s fit check)
count for a task that samples on the run's devices (GRPO's rollouts)."""

from __future__ import annotations

import math

from core.mesh import LOGICAL_AXES
from core.sampler.cache import LayerLayout
from core.sampler.params import SamplerShape
from core.sharding import ParamPlan, axes_of, gathered_spec


def cache_bytes_per_device(layout: list[LayerLayout], shape: SamplerShape,
                           bytes_per_value: int, mesh_sizes: dict[str, int]) -> float:
    """Bytes one device holds of the cache `GenerationCache` makes for `shape`: every
    layer's streams, [rows, slots, *per_token] (a window layer: a ring of `window` slots
    when that is shorter), each split as the xla backend places it (its `spec`, a dim split
    over its axes only where their devices divide it, else whole)."""
    total = 0.0
    for layer in layout:
        slots = layer.window if 0 < layer.window < shape.slots else shape.slots
        for stream in layer.streams:
            dims = (shape.rows, slots, *stream.per_token)
            total += math.prod(dims) * bytes_per_value / split(stream.spec, dims, mesh_sizes)
    return total


def split(spec: tuple, dims: tuple[int, ...], mesh_sizes: dict[str, int]) -> int:
    """Into how many parts `spec` (logical axes allowed) cuts a tensor of `dims`."""
    parts = 1
    for dim, size in zip(spec, dims, strict=True):
        axes = axes_of(LOGICAL_AXES.get(dim, dim) if isinstance(dim, str) else dim)
        devices = math.prod(mesh_sizes.get(axis, 1) for axis in axes)
        parts *= devices if size % devices == 0 else 1
    return parts


def gathered_weight_bytes(plan: list[ParamPlan], bytes_per_value: int,
                          mesh_sizes: dict[str, int]) -> float:
    """Bytes one device holds of the weights a sampler reads on the xla backend: every
    parameter in the compute dtype, split by its `gathered_spec` only."""
    return sum(math.prod(entry.shape) * bytes_per_value
               / split(gathered_spec(entry.spec), entry.shape, mesh_sizes) for entry in plan)
