"""The hosts of a slice as one run sees them: which host this is, how many there are, and the
few things they must agree on (a barrier, "did any host get SIGTERM", what each host sees).

On a multi-host TPU slice the hosts are torch_xla's processes (`xr.process_index/count`) and
they talk over a gloo group rendezvoused through `xla://`. Launched by torchrun instead
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set), each process is a host running its own
XLA runtime and they rendezvous through `env://`: that is how several processes stand in for
a slice on one CPU machine, since torch_xla's CPU runtime cannot span processes. A lone
process is one host, and every agreement is trivial.

Collectives here run on CPU tensors: gloo silently leaves XLA tensors unchanged, and
`dist.barrier` fails once torchax has been imported (it renames the private-use backend that
barrier asks for), so the barrier is a one-element all_reduce.
"""

from __future__ import annotations

import dataclasses
import functools
import os


@dataclasses.dataclass(frozen=True)
class Hosts:
    index: int
    count: int
    group: object = None  # a torch.distributed process group; None on one host

    @property
    def main(self) -> bool:
        """Host 0 alone writes what there is one of: metrics, W&B, commit markers, the lock."""
        return self.index == 0

    def barrier(self) -> None:
        self._all_reduce(0)

    def any(self, flag: bool) -> bool:
        """True on every host when it is true on at least one."""
        return bool(self._all_reduce(int(flag), op="MAX"))

    def gather(self, value) -> list:
        """Every host's `value` (picklable), in host order, on every host."""
        if self.group is None:
            return [value]
        import torch.distributed as dist  # start-up

        values = [None] * self.count
        dist.all_gather_object(values, value, group=self.group)
        return values

    def new_group(self) -> Hosts:
        """The same hosts over a group of their own, for collectives on another thread (a
        background checkpoint write) that must not interleave with this group's."""
        if self.group is None:
            return self
        import torch.distributed as dist  # start-up

        return Hosts(self.index, self.count, dist.new_group(backend="gloo"))

    def _all_reduce(self, value: int, op: str = "SUM") -> int:
        if self.group is None:
            return value
        import torch  # start-up
        import torch.distributed as dist  # start-up

        tensor = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op), group=self.group)
        return int(tensor.item())


@functools.cache
def current() -> Hosts:
    """This process's view of the slice; the gloo group is set up on first use."""
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        return join("env://")
    import torch.distributed as dist  # start-up

    if dist.is_available() and dist.is_initialized():  # the dtensor backend's group of one
        return Hosts(0, 1)
    from core.backends.xla.runtime import hosts_rendezvous  # start-up

    rendezvous = hosts_rendezvous()
    return join(rendezvous) if rendezvous else Hosts(0, 1)


def join(init_method: str) -> Hosts:
    """The hosts as the default process group (gloo), rendezvoused by `init_method`."""
    import torch.distributed as dist  # start-up

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=init_method)
    return Hosts(dist.get_rank(), dist.get_world_size(), dist.group.WORLD)
