"""Where this process runs: a TPU VM or not, which slice type, how much host memory.

`configure()` must run before torch_xla is imported: it picks the CPU backend on machines
without a TPU so the same code runs unchanged on a laptop, a CPU CI box and a TPU VM.
(What torch_xla then sees: core/backends/xla/runtime.py.)
"""

from __future__ import annotations

import glob
import importlib.metadata
import os


def on_tpu_vm() -> bool:
    return (
        bool(os.environ.get("TPU_ACCELERATOR_TYPE"))
        or bool(glob.glob("/dev/accel*"))
        or (os.path.exists("/dev/vfio/0"))
    )


def configure() -> None:
    """Choose the PJRT backend (TPU on a TPU VM, else CPU) unless the user already did."""
    if "PJRT_DEVICE" not in os.environ:
        os.environ["PJRT_DEVICE"] = "TPU" if on_tpu_vm() else "CPU"
    # XLA warns on every compile that GSPMD is deprecated; keep errors, drop that noise.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def tpu_type() -> str | None:
    """This TPU VM's slice type (e.g. v4-32): TPU_ACCELERATOR_TYPE, else the GCE metadata
    server (1 s timeout); None off TPU."""
    if os.environ.get("TPU_ACCELERATOR_TYPE"):
        return os.environ["TPU_ACCELERATOR_TYPE"]
    if not on_tpu_vm():
        return None
    import urllib.request  # start-up

    request = urllib.request.Request(
        "http://metadata.google.internal/computeMetadata/v1/instance/attributes/accelerator-type",
        headers={"Metadata-Flavor": "Google"},
    )
    try:
        with urllib.request.urlopen(request, timeout=1) as response:
            return response.read().decode().strip()
    except OSError:
        return None


def host_memory_available() -> int | None:
    """Bytes of host memory available to a new workload now (Linux MemAvailable)."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
