"""torch_xla's Pallas kernels (flash attention) traced on a machine without a TPU, so a
compile-only plan holds the same `tpu_custom_call`s the slice runs.

torch_xla lowers a Pallas kernel through JAX (`custom_kernel.trace_pallas`) for JAX's
default backend; on a CPU machine Pallas refuses ("Only interpret mode is supported on CPU
backend"). Inside `pallas_lowering_for_tpu` the kernel is lowered for the 'tpu' platform
instead (Mosaic needs no TPU), serialised in a Mosaic version the compiling libtpu reads
(JAX picks it from the attached TPU's build date, and there is none), and flash attention's
kernels declare their matmul FLOPs: libtpu's cost analysis counts a custom call only
through the estimate its payload declares; the backward kernels declare none (their FLOPs
would count as zero) and the forward's adds softmax's elementwise work (4 FLOPs a score,
0.08% of llama-8b's step) to its two matmuls. Private JAX and
torch_xla internals are patched only within the block; re-check them when the pins move.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import re

import torch

FORWARD_COMPATIBLE_IR_VERSION = 7  # jax 0.7.1's Mosaic format for older readers
# matmuls per score element: the forward's QK^T and PV; dq recomputes QK^T and dO V^T and
# forms dS K; dkv recomputes both and forms P^T dO and dS^T Q
ATTENTION_MATMULS = {"_flash_attention_impl": 2, "_flash_attention_bwd_dq": 3,
                     "_flash_attention_bwd_dkv": 4}
_payloads: dict = {}  # one lowering per kernel and shape within a block: every layer's is alike


def _older_than(platform_version: str):
    """JAX's `is_cloud_tpu_older_than`, answered for the libtpu of `platform_version`
    (e.g. 'TFRT TPU v5\\nBuilt on Aug 1 2025 14:50:34 (1754085034) cl/789893895')."""
    stamps = re.findall(r"\((\d+)\)", platform_version)
    if not stamps:
        return lambda year, month, day: True  # JAX's own answer for an unknown build
    built = datetime.date.fromtimestamp(int(stamps[-1]))
    return lambda year, month, day: built < datetime.date(year, month, day)


def _cost_estimate(kernel, jax_args: list, declared: dict | None) -> dict | None:
    """A flash-attention kernel's cost estimate with its matmul FLOPs, 2*B*H*Sq*Sk*D per
    matmul (dense, as the compiled program's other matmuls and MaxText's splash kernels are
    counted); the kernel's own bytes and transcendentals where it declares them."""
    matmuls = ATTENTION_MATMULS.get(getattr(kernel, "__name__", ""))
    if matmuls is None:
        return None
    q, k = jax_args[0], jax_args[1]
    batch, heads, q_len, head_dim = q.shape
    scores = batch * heads * q_len * k.shape[2]
    flops = 2 * matmuls * scores * head_dim
    if declared:
        return {**declared, "flops": flops}
    arrays = [a for a in jax_args if hasattr(a, "shape") and hasattr(a, "dtype")]
    # the softmax statistics (rank 3) reach the kernel broadcast over 128 lanes
    read = sum(math.prod(a.shape) * a.dtype.itemsize * (128 if len(a.shape) == 3 else 1)
               for a in arrays)
    written = (math.prod(q.shape) * q.dtype.itemsize if matmuls == 3
               else 2 * math.prod(k.shape) * k.dtype.itemsize)
    return {"flops": flops, "transcendentals": scores, "bytes_accessed": read + written}


def _trace_pallas_for_tpu(kernel, *args, static_argnums=None, static_argnames=None,
                          use_cache=False, **kwargs):
    """Drop-in for `custom_kernel.trace_pallas` that lowers for the 'tpu' platform."""
    import jax  # jax
    import jax._src.pallas.mosaic.pallas_call_registration  # noqa: F401 (jax: Mosaic lowering)
    from torch_xla.experimental import custom_kernel  # torch_xla

    jax_args = [custom_kernel.to_jax_shape_dtype_struct(a) if torch.is_tensor(a) else a
                for a in args]
    tensor_args = [a for a in args if torch.is_tensor(a)]
    key = (kernel, static_argnums, tuple(static_argnames or ()), tuple(jax_args),
           repr(sorted(kwargs.items())))
    if use_cache and key in _payloads:
        return _payloads[key], tensor_args
    jitted = jax.jit(kernel, static_argnums=static_argnums, static_argnames=static_argnames)
    lowered = jitted.trace(*jax_args, **kwargs).lower(lowering_platforms=("tpu",))
    payload = custom_kernel._extract_backend_config(lowered.compiler_ir())
    if payload is None:
        raise RuntimeError(f"lowering {kernel} for 'tpu' gave no tpu_custom_call")
    config = json.loads(payload)
    kernel_config = config["custom_call_config"]
    cost = _cost_estimate(kernel, jax_args, kernel_config.get("cost_estimate"))
    if cost is not None:
        kernel_config["cost_estimate"] = cost
        payload = json.dumps(config)
    if use_cache:
        _payloads[key] = payload
    return payload, tensor_args


@contextlib.contextmanager
def pallas_lowering_for_tpu(platform_version: str):
    """Within the block, Pallas kernels lower for TPU in the Mosaic version of the libtpu
    whose compile-only client reports `platform_version`."""
    from jax._src import tpu_custom_call  # jax
    from torch_xla.experimental import custom_kernel  # torch_xla

    saved = (custom_kernel.trace_pallas, tpu_custom_call.is_cloud_tpu_older_than,
             tpu_custom_call.get_ir_version)
    newest = tpu_custom_call.get_ir_version

    def ir_version(ctx):
        # None is JAX's newest format (8 for jax 0.7.1), which neither libtpu 0.0.20 nor
        # torch_xla's 0.0.21 reads ("expected <= 7"): write the forward-compatible one.
        return newest(ctx) or FORWARD_COMPATIBLE_IR_VERSION

    _payloads.clear()
    custom_kernel.trace_pallas = _trace_pallas_for_tpu
    tpu_custom_call.is_cloud_tpu_older_than = _older_than(platform_version)
    tpu_custom_call.get_ir_version = ir_version
    try:
        yield
    finally:
        (custom_kernel.trace_pallas, tpu_custom_call.is_cloud_tpu_older_than,
         tpu_custom_call.get_ir_version) = saved
