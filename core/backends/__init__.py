"""The seam between zoo's trainer and the engine that runs its step.

The trainer (core/engine.py) and checkpoints (core/checkpoint.py) ask a backend for what
differs between engines: the processes and devices, how a model is placed and sharded, how
a batch reaches the devices, how a step runs and when its values can be read, the RNG and
the host copy a checkpoint writes. Two implement it:

  xla      torch_xla's SPMD: one process per host drives every device of the slice with
           one global program (TPU VMs; XLA:CPU here). The default.
  dtensor  upstream torch.distributed: one process per device (launched by torchrun), a
           DeviceMesh with zoo's axis names, FSDP2 `fully_shard` for the fsdp role, DCP
           checkpoints in the same layout; gloo on CPUs, NCCL on GPUs. TorchTPU runs this
           program on TPUs (`tpu_dist`, device "tpu"), which is what it is shaped for.

A backend refuses in one line what it cannot run (a preset it cannot express)."""

from __future__ import annotations

from zoo.core.errors import UserError

BACKENDS = ("xla", "dtensor")


def get(name: str):
    """The backend called `name` (imported only when asked for: neither needs the other)."""
    if name == "xla":
        from zoo.core.backends.xla import XlaBackend

        return XlaBackend()
    if name == "dtensor":
        from zoo.core.backends.dtensor import DTensorBackend

        return DTensorBackend()
    raise UserError(f"backend '{name}' is not one of {', '.join(BACKENDS)}")
