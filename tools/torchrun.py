"""`zoo train --backend dtensor --nproc N`: the same command run as N processes by torchrun's
own launcher (torch.distributed's elastic agent, standalone rendezvous on this machine), each
one rank of the dtensor backend's process group. On several machines, start `zoo train
--backend dtensor` under `torchrun` yourself: a process that torchrun started launches
nothing."""

from __future__ import annotations

import os
import sys
import uuid

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from core.errors import UserError


def launch(nproc: int, argv: list[str]) -> None:
    """Run `zoo <argv>` in `nproc` processes and wait for all; one line if any fails."""
    # as torchrun does: processes sharing a host's cores do not each start a thread per core
    cores = len(os.sched_getaffinity(0))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cores // nproc)))
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # not gloo's line per connection
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc,
                          run_id=str(uuid.uuid4()), rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.5)
    try:
        elastic_launch(config, sys.executable)("-m", "tools.cli", *argv)
    except ChildFailedError as error:
        failed = sorted(error.failures)
        codes = sorted({failure.exitcode for failure in error.failures.values()})
        raise UserError(f"process(es) {failed} of {nproc} failed (exit code "
                        f"{', '.join(map(str, codes))}); their output above says why") from None
