"""torch_xla's operations that zoo's layers call on an XLA device: the scan of a layer
stack, the checkpoint that XLA cannot optimise away, host offloading, Pallas flash
attention. Each imports torch_xla when first called."""

from __future__ import annotations

import math

from core.mesh import BATCH_AXES


def scan(fn, init, xs, partition_fn):
    """torch_xla's scan with its trace cache on (`fn` is pure and kept by the caller)."""
    from torch_xla.experimental.scan import scan as xla_scan  # torch_xla

    return xla_scan(fn, init, xs, partition_fn=partition_fn, is_fn_pure=True)


def checkpoint(forward, *args, **kwargs):
    """torch_xla's activation checkpoint: an optimization barrier keeps XLA from CSE-ing
    the recompute away."""
    from torch_xla.utils.checkpoint import checkpoint as xla_checkpoint  # torch_xla

    return xla_checkpoint(forward, *args, **kwargs)


def register_offload_ops() -> None:
    """torch.ops.xla.place_to_host / place_to_device (TPU memory-space annotations)."""
    import torch_xla.experimental.stablehlo_custom_call  # noqa: F401 (torch_xla)


def flash_attention(q, k, v, segment_ids=None):
    """torch_xla's Pallas flash attention (TPU only), causal, sharded like the activations:
    batch over the batch axes, heads over tensor, when an SPMD mesh is set. `segment_ids`
    [batch, seq] keep packed documents apart (the kernel splits them as it splits q)."""
    import torch_xla.distributed.spmd as xs  # torch_xla
    from torch_xla.experimental.custom_kernel import flash_attention as pallas_flash  # torch_xla

    mesh = xs.get_global_mesh()
    spec = (BATCH_AXES, "tensor", None, None) if mesh is not None else None
    scale = 1.0 / math.sqrt(q.shape[-1])
    if segment_ids is not None:  # the kernel is built by JAX without 64-bit types
        segment_ids = segment_ids.int()
    return pallas_flash(q, k, v, causal=True, q_segment_ids=segment_ids,
                        kv_segment_ids=segment_ids, sm_scale=scale, partition_spec=spec,
                        mesh=mesh)
