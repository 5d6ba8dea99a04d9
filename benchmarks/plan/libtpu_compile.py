"""Compile an HLO module for a TPU topology with whatever JAX and libtpu this Python has,
compile-only (no TPU), and return the compiler's raw figures and its optimized HLO text.

It imports nothing of zoo and no torch: MaxText's environment (another Python, another
JAX and libtpu) loads this file by path, so one program can be compiled there by the same
libtpu as MaxText's own (benchmarks/plan/maxtext_compile_worker.py). Runs on jax 0.7.1 (zoo's
pin) and 0.12 (MaxText 0.2.5's); the private JAX calls are the ones both share.
"""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np

STAT_FIELDS = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "code_bytes",
               "flops", "bytes_accessed", "optimal_seconds", "compile_seconds")


@contextlib.contextmanager
def quiet_stderr():
    """libtpu logs warnings about the TPU it does not find (TPU_ACCELERATOR_TYPE, worker
    hostnames) straight to file descriptor 2; hide them while the compiler is in use."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def topology_devices(target: dict) -> list:
    """The compile-only JAX devices of a topology (`get_topology_desc` arguments)."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")  # no GCE metadata lookups off a TPU VM
    # compile-only use holds no chip: let several processes (plans, tests) load libtpu
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental.topologies import get_topology_desc  # jax

    arguments = {k: tuple(v) if isinstance(v, list) else v for k, v in target.items()}
    with quiet_stderr():
        return list(get_topology_desc(platform="tpu", **arguments).devices)


def executable_stats(memory, costs, seconds: float) -> dict:
    """The figures zoo reads from a compiled program: per-chip memory (a
    CompiledMemoryStats), the cost analysis (a dict, or a list of one on older JAX) and
    the compile time."""
    costs = costs[0] if isinstance(costs, list) else costs or {}
    optimal = costs.get("optimal_seconds")
    return {
        "argument_bytes": memory.argument_size_in_bytes,
        "output_bytes": memory.output_size_in_bytes,
        "alias_bytes": memory.alias_size_in_bytes,
        "temp_bytes": memory.temp_size_in_bytes,
        "code_bytes": memory.generated_code_size_in_bytes,
        "flops": float(costs.get("flops", 0.0)),
        "bytes_accessed": float(costs.get("bytes accessed", 0.0)),
        "optimal_seconds": float(optimal) if optimal and optimal > 0 else None,
        "compile_seconds": seconds,
    }


def compile_text(hlo_text: str, devices: list) -> tuple[dict, str]:
    """(figures, optimized HLO text) of an SPMD HLO module (text, shardings written in)
    compiled over `devices`; when the compiler refuses it, ({"error": its message,
    "compile_seconds": s}, "")."""
    import jax  # jax
    from jax._src.interpreters import mlir  # jax
    from jax._src.lib import xla_client as xc  # jax

    parse = getattr(getattr(xc, "hlo", None), "hlo_module_from_text", None)
    proto = (parse or xc._xla.hlo_module_from_text)(hlo_text).as_serialized_hlo_module_proto()
    options = xc.CompileOptions()
    build = options.executable_build_options
    build.use_spmd_partitioning = True
    build.num_partitions = len(devices)
    build.num_replicas = 1
    # partition i runs on devices[i], by the device's own id (a multi-slice topology numbers
    # slice s's devices from (s + 1) x 100000)
    build.device_assignment = xc.DeviceAssignment.create(
        np.array([device.id for device in devices]).reshape(1, len(devices)))
    client = devices[0].client
    start = time.perf_counter()
    try:
        with mlir.make_ir_context(), quiet_stderr():
            module = mlir.ir.Module.parse(xc._xla.mlir.hlo_to_stablehlo(proto))
            module.operation.walk(_drop_empty_tilings)
            target = {"executable_devices": xc.DeviceList(tuple(devices)),
                      "compile_options": options}
            try:  # jax 0.12's client takes the module itself, jax 0.7.1's its bytecode
                executable = client.compile(module, **target)
            except TypeError:
                executable = client.compile(mlir.module_to_bytecode(module), **target)
    except jax.errors.JaxRuntimeError as error:
        return {"error": str(error), "compile_seconds": time.perf_counter() - start}, ""
    seconds = time.perf_counter() - start
    text = "\n".join(m.to_string() for m in executable.hlo_modules())
    return executable_stats(executable.get_compiled_memory_stats(),
                            executable.cost_analysis(), seconds), text


def _drop_empty_tilings(op):
    """A newer XLA's HLO-to-StableHLO import writes `result_tilings = [[]]` on
    layout-constrained custom calls (the Pallas kernels); libtpu 0.0.52's StableHLO (1.16)
    has no such attribute and refuses the module. Empty tilings say nothing: drop them."""
    from jax._src.interpreters import mlir  # jax

    tilings = op.attributes["result_tilings"] if "result_tilings" in op.attributes else None
    if tilings is not None and all(len(tiling) == 0 for tiling in tilings):
        del op.attributes["result_tilings"]
    return mlir.ir.WalkResult.ADVANCE
