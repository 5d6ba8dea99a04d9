"""The seam between zoo's trainer and the engine that runs its step.

The trainer (core/engine.py) and checkpoints (core/store/checkpoint.py) ask a backend for what
differs between engines: the processes and devices, how a model is placed and sharded, how
a batch reaches the devices, how a step runs and when its values can be read, the RNG and
the host copy a checkpoint writes. Two implement it:

  xla      torch_xla's SPMD: one process per host drives every device of the slice with
           one global program (TPU VMs; XLA:CPU here). The default.
  dtensor  upstream torch.distributed: one process per device (launched by torchrun), a
           DeviceMesh with zoo's axis names, FSDP2 `fully_shard` for the fsdp role, DCP
           checkpoints in the same layout; gloo on CPUs, NCCL on GPUs. TorchTPU runs this
           program on TPUs (`tpu_dist`, device "tpu"), which is what it is shaped for.

What a backend answers, method by method, is the `Backend` protocol (core/backends/contract.py);
`get` returning either backend as one is where mypy checks that both implement it."""

from __future__ import annotations

import torch

from core.backends.contract import Backend
from core.backends.xla import XlaBackend
from core.backends.xla.runtime import installed
from core.backends.xla.spmd import sharded_zeros
from core.errors import UserError

BACKENDS = ("xla", "dtensor")


def get(name: str) -> Backend:
    """The backend called `name` (dtensor imported only when asked for: FSDP2 and
    torch._dynamo take a second to import)."""
    if name == "xla":
        if not installed():
            raise UserError("the xla backend needs torch_xla, which is not installed: "
                            "./setup_vm.sh (or pip install 'zoo[xla]'), or run with --backend "
                            "dtensor")
        return XlaBackend()
    if name == "dtensor":
        from core.backends.dtensor import DTensorBackend  # start-up

        return DTensorBackend()
    raise UserError(f"backend '{name}' is not one of {', '.join(BACKENDS)}")


def zeros_like_param(param: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Zeros shaped like `param`, on its device with its sharding: optimizer state as a
    training step would create it. Made on the host and transferred, so no graph compiles."""
    from torch.distributed.tensor import DTensor  # start-up

    if isinstance(param, DTensor):  # the dtensor backend: same placements, local zeros
        return torch.zeros_like(param.detach(), dtype=dtype or param.dtype)
    if param.device.type == "xla":
        return sharded_zeros(param, dtype or param.dtype)
    return torch.zeros(param.shape, dtype=dtype or param.dtype)
