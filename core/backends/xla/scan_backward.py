"""Why a scanned layer stack's backward waits for the devices first (the SIGSEGV of issue 62).

torch_xla's scan lowers its loop body to HLO while the step is traced (PyLoweringContext
.build), not when the step's graph is cut and compiled. The forward body is traced over
placeholders and holds no real data; the backward's body does: under SPMD torch_xla's
`_backward_shard_alike` ties each gradient's sharding to the real input with `shard_as`, so
the scan's real inputs (the stacked weights, and the carry's graph back to the embedding
weights) are lowered inside the body, and lowering a tensor's device data reads its buffer
handle. Those weights are outputs of the previous step, whose graph torch_xla executes
asynchronously: until that execution ends their data is a sharded placeholder with no
shards, and `PjRtShardedData::GetHandle()` reads `shards[0]` of an empty vector -- a crash
on the autograd thread, now and then (when the next step's backward is traced before the
previous step finished; 1 run in 4-6 of the tiny-scan-4dev benchmark on XLA:CPU).

The normal path never meets this: the step's own graph is lowered after torch_xla locks the
devices, i.e. after the previous execution ended. So the scan's backward does the same, and
only it: a hook on the scan's output waits for the devices right before the backward's body
is traced. The forward (and everything traced before it) still overlaps the previous step's
execution; XLA_SYNC_WAIT=1 would also cure it but waits on every step's whole execution.
"""

from __future__ import annotations

import torch


def wait_before_backward(output: torch.Tensor) -> torch.Tensor:
    """`output` (a scan's result), with its backward made to wait for the devices' pending
    executions before torch_xla traces and lowers the scanned backward."""
    if output.requires_grad:
        output.register_hook(_wait_for_devices)
    return output


def _wait_for_devices(grad: torch.Tensor) -> None:
    """A gradient hook that changes nothing: it only waits, so that the previous step's
    outputs hold their buffers when the scan's backward lowers them."""
    import torch_xla  # torch_xla

    torch_xla._XLAC._xla_wait_device_ops([])
