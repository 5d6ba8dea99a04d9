"""torch_xla's SPMD for zoo: the mesh over the runtime's devices, parameters and module
outputs marked with a preset's specs, and batches sent to the devices already split."""

from __future__ import annotations

import math

import torch

from core.inputs import batch_spec
from core.mesh import (
    AXES,
    LOGICAL_AXES,
    MeshConfig,
    axis_sizes,
    resolve_axis_sizes,
    slice_major_device_ids,
)
from core.sharding import (
    ParamPlan,
    Rule,
    ShardingError,
    ShardingRules,
    axes_of,
    check_spec,
    match_activations,
    match_gathered,
    plan_params,
)


def build_mesh(config: MeshConfig):
    """An `xs.Mesh` over every device of the runtime (HybridMesh on TPU for topology order)."""
    import torch_xla.distributed.spmd as xs  # torch_xla
    import torch_xla.runtime as xr  # torch_xla

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
    else:  # XLA:CPU: slices simulated as contiguous groups of the virtual devices
        ids = slice_major_device_ids(sizes, config.dcn)
        mesh = xs.Mesh(ids.flatten(), tuple(sizes[a] for a in AXES), AXES)
    xs.set_global_mesh(mesh)
    return mesh


def shard_model(model, rules: ShardingRules, mesh) -> list[ParamPlan]:
    """Annotate every parameter (in place) and hook module outputs; returns the plan.

    The model must already be on the XLA device. Activation specs are applied with
    `mark_sharding_with_gradients`, so the backward pass gets the same layout; gathered
    weights' specs to the forward only (core/sharding.py).
    """
    import torch_xla.distributed.spmd as xs  # torch_xla

    plan = plan_params(model, rules, axis_sizes(mesh))
    params = dict(model.named_parameters())
    for entry in plan:
        xs.mark_sharding(params[entry.name], mesh, entry.spec)
    if math.prod(axis_sizes(mesh).values()) > 1:  # one device: nothing to pin, host time saved
        shard_activations(model, rules, mesh)
    return plan


def shard_activations(model, rules: ShardingRules, mesh) -> None:
    """Hook the outputs of the modules the activation and gathered rules name, to mark
    their sharding (activations' gradients too, gathered weights' not)."""
    import torch_xla.distributed.spmd as xs  # torch_xla

    mesh_axes = axis_sizes(mesh)
    modules = dict(model.named_modules())
    for kind, rules_of, pin in (("activation", match_activations,
                                 xs.mark_sharding_with_gradients),
                                ("gathered", match_gathered, _PinForward.apply)):
        for name, rule in rules_of(model, rules).items():
            modules[name].register_forward_hook(
                _output_sharder(name, rule, mesh, mesh_axes, pin, kind))


class _PinForward(torch.autograd.Function):
    """A sharding annotation on a value and not on its gradient. torch_xla's op, as its
    `mark_sharding_with_gradients` calls it: it traces under AOTAutograd (scanned layers)."""

    @staticmethod
    def forward(ctx, tensor, mesh, spec):
        return torch.ops.xla.aot_mark_sharding(tensor, str(mesh), str(tuple(spec)))

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


def _output_sharder(name: str, rule: Rule, mesh, mesh_axes, pin, kind: str):
    def hook(module, inputs, output):
        first = output[0] if isinstance(output, tuple) else output
        if not isinstance(first, torch.Tensor):
            raise ShardingError(
                f"{kind} rule '{rule.pattern}': module '{name}' returns no tensor to shard"
            )
        check_spec(rule.spec, tuple(first.shape), mesh_axes,
                   f"{kind} output '{name}' (rule '{rule.pattern}')")
        sharded = pin(first, mesh, rule.spec)
        return (sharded, *output[1:]) if isinstance(output, tuple) else sharded

    return hook


def batch_shardings(mesh, example: dict) -> dict:
    """Per-key `ShardingSpec`s for `MpDeviceLoader(input_sharding=...)`."""
    import torch_xla.distributed.spmd as xs  # torch_xla
    import torch_xla.runtime as xr  # torch_xla

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
    import torch_xla  # torch_xla
    import torch_xla.distributed.parallel_loader as pl  # torch_xla

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
    import torch_xla  # torch_xla
    import torch_xla.distributed.spmd as xs  # torch_xla

    out = {}
    for key, value in batch.items():
        value = value.to(torch_xla.device())
        xs.mark_sharding(value, mesh, batch_spec(value.shape, axis_sizes(mesh)))
        out[key] = value
    return out


def sharded_zeros(param, dtype) -> torch.Tensor:
    """Zeros shaped like an XLA `param`, on its device with its sharding, made on the host
    and transferred (no graph compiles)."""
    import torch_xla  # torch_xla

    zeros = torch.zeros(param.shape, dtype=dtype).to(param.device)
    sharding = torch_xla._XLAC._get_xla_op_sharding(param)
    if sharding is not None:
        torch_xla._XLAC._xla_mark_sharding(zeros, sharding)
    return zeros


def divisible_spec(spec: tuple, shape: tuple[int, ...], mesh_axes: dict[str, int]) -> tuple:
    """`spec` (logical axes allowed) as mesh axes, each dim keeping the axes only if their
    devices divide it: a sampler's kv heads split over `tensor` where they can be."""
    resolved = []
    for dim, size in zip(spec, shape, strict=True):
        axes = axes_of(LOGICAL_AXES.get(dim, dim) if isinstance(dim, str) else dim)
        resolved.append(axes if axes and size % math.prod(mesh_axes[a] for a in axes) == 0
                        else None)
    return tuple(resolved)


def sampler_zeros(shape: tuple[int, ...], dtype, spec: tuple, mesh) -> torch.Tensor:
    """Zeros made on the host, sent to the device and marked as `spec`: a sampler's cache or
    state, placed where the activations of its rows are (no graph compiles)."""
    import torch_xla  # torch_xla
    import torch_xla.distributed.spmd as xs  # torch_xla

    zeros = torch.zeros(shape, dtype=dtype).to(torch_xla.device())
    xs.mark_sharding(zeros, mesh, divisible_spec(spec, shape, axis_sizes(mesh)))
    return zeros


def gathered_on_host(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded tensor's value on the host, put together from its shards. Its `.cpu()`
    would compile (and run) a graph that gathers them on the devices first: a compile per
    read of the sampler's state. Only for computed tensors (after a sync)."""
    import torch_xla  # torch_xla
    import torch_xla.core.xla_model as xm  # torch_xla
    from torch_xla.distributed.spmd import XLAShardedTensor  # torch_xla

    if not torch_xla._XLAC._get_xla_sharding_spec(tensor):
        return tensor.cpu()
    xm.wait_device_ops()  # the shards are read directly: the graph that makes them has run
    whole = torch.empty(tensor.shape, dtype=tensor.dtype)
    for shard in XLAShardedTensor(tensor).local_shards:
        if shard.indices is Ellipsis:  # replicated
            return shard.data
        index = tuple(shard.indices)
        whole[index] = shard.data[tuple(slice(0, i.stop - i.start) for i in index)]
    return whole
