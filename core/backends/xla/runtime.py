"""torch_xla's runtime as zoo uses it: SPMD mode started once, what it sees, its compile
counters, its processes as a group of hosts, its device for evaluation."""

from __future__ import annotations

import dataclasses
import os
import sys

from core.runtime import configure, tpu_type, version


def installed() -> bool:
    try:
        import torch_xla  # noqa: F401 (torch_xla)
    except ImportError:
        return False
    return True


def started() -> bool:
    """Whether this process's XLA runtime is up, its devices fixed for good (importing
    torch_xla does not start it)."""
    if "torch_xla" not in sys.modules:
        return False
    import torch_xla  # torch_xla

    return torch_xla._XLAC._xla_runtime_is_initialized()


def start() -> None:
    """PJRT's device chosen (core/runtime.configure) and SPMD mode on: before any XLA
    tensor exists."""
    configure()
    import torch_xla.runtime as xr  # torch_xla

    xr.use_spmd()


@dataclasses.dataclass
class RuntimeInfo:
    torch: str | None
    torch_xla: str | None
    jax: str | None
    torchax: str | None
    pjrt_device: str
    device_count: int
    process_index: int
    process_count: int
    tpu_type: str | None  # e.g. "v4-32" on a TPU VM, None elsewhere


def detect() -> RuntimeInfo:
    """Initialise the XLA runtime (SPMD mode) and report what it sees."""
    start()
    import torch_xla.runtime as xr  # torch_xla

    return RuntimeInfo(
        torch=version("torch"),
        torch_xla=version("torch_xla"),
        jax=version("jax"),
        torchax=version("torchax"),
        pjrt_device=xr.device_type() or os.environ["PJRT_DEVICE"],
        device_count=xr.global_runtime_device_count(),
        process_index=xr.process_index(),
        process_count=xr.process_count(),
        tpu_type=tpu_type(),
    )


def compile_stats() -> tuple[int, float]:
    """XLA compilations so far in this process and their total seconds (torch_xla's
    CompileTime metric)."""
    import torch_xla.debug.metrics as met  # torch_xla

    data = met.metric_data("CompileTime")
    return (int(data[0]), data[1] / 1e9) if data else (0, 0.0)


def hosts_rendezvous() -> str | None:
    """How torch_xla's processes of a multi-host slice meet as a process group (`xla://`,
    registered here), or None on one host."""
    import torch_xla.runtime as xr  # torch_xla

    if xr.process_count() == 1:
        return None
    import torch_xla.distributed.xla_backend  # noqa: F401 (torch_xla: registers xla://)

    return "xla://"


def device():
    import torch_xla  # torch_xla

    return torch_xla.device()


def sync() -> None:
    """Cut the graph traced so far and dispatch it."""
    import torch_xla  # torch_xla

    torch_xla.sync()


def peak_memory() -> int | None:
    """Peak device memory where the runtime reports it (TPU); None on the CPU backend."""
    import torch_xla.core.xla_model as xm  # torch_xla

    try:
        info = xm.get_memory_info()
    except Exception:  # the CPU backend has no memory stats
        return None
    return info.get("peak_bytes_used") or info.get("bytes_used")


def sync_and_wait() -> None:
    """Run what is traced so far and wait for the devices to finish it."""
    import torch_xla  # torch_xla
    import torch_xla.core.xla_model as xm  # torch_xla

    torch_xla.sync()
    xm.wait_device_ops()
