"""Shared pieces of the multi-device tests.

The PJRT device count is fixed per process, so each device count runs a worker module
(tests.support.*_worker) in its own process (in parallel) and the tests compare the saved
results.
"""

import re
import warnings
from pathlib import Path

import torch

from tests.support.runs import env, start_python

# XLA:CPU runs each virtual device as a thread and aborts a collective that one of them has
# not reached in 10 s (a timeout no flag changes): on 2 cores, with other work competing, a
# starved thread can miss it (8 device threads queue their matmuls on one shared Eigen pool).
# Such a worker is run again alone, each device thread computing its own matmuls, so the OS
# shares the cores among them evenly; on a machine busy with other work that can still miss,
# so it is tried up to RUNS times, each retry reported as a warning; a program that truly
# hangs fails every time.
STARVED = "Termination timeout for"
EVEN_THREADS = "--xla_cpu_multi_thread_eigen=false"
RUNS = 4
# A worker runs each tiny program once or twice, so compiling is most of its time, and
# LLVM's optimisation of the machine code most of compiling on XLA:CPU: without it a
# worker's program compiles in less than half the CPU time (llama's presets on 8 devices:
# 6.5 -> 2.9 s unrolled, 11.8 -> 5.3 s scanned) to the same HLO, shards and losses. (A
# `zoo train` of many steps of llama-tiny runs slower unoptimised: the e2e runs keep it.)
UNOPTIMISED_CODE = "--xla_backend_optimization_level=0"


def xla_cpu_env(devices: int, *xla_flags: str) -> dict:
    """Environment for a child process with `devices` virtual XLA CPU devices."""
    environment = env()
    flags = " ".join([environment.get("XLA_FLAGS", ""), *xla_flags]).strip()
    return {**environment, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices),
            **({"XLA_FLAGS": flags} if flags else {})}


def run_workers(module: str, device_counts, out_dir: Path, timeout: int = 900,
                args=()) -> dict:
    """Run `python -m module OUT.pt *args` from the repo root once per device count, each
    forked from the zoo server (tests/support/runs.py start_python); returns
    {count: results}."""
    def start(n: int, *xla_flags: str):
        return start_python([str(out_dir / f"{n}.pt"), *args],
                            xla_cpu_env(n, UNOPTIMISED_CODE, *xla_flags), timeout, module)

    def finish(proc) -> str:
        return "".join(proc.communicate(timeout=timeout))

    procs = {n: start(n) for n in device_counts}
    results = {}
    for n, proc in procs.items():
        log = finish(proc)
        for attempt in range(2, RUNS + 1):
            if proc.returncode == 0 or STARVED not in log:
                break
            warnings.warn(f"{module} on {n} devices: a device thread was starved past XLA:CPU's "
                          f"collective timeout (a busy machine); run {attempt} of {RUNS}",
                          stacklevel=2)
            proc = start(n, EVEN_THREADS)  # alone: the others have ended
            log = finish(proc)
        assert proc.returncode == 0, f"{module} on {n} devices failed:\n{log[-3000:]}"
        results[n] = torch.load(out_dir / f"{n}.pt", weights_only=False)
    return results


def sharded_loss_and_grads(model, loss_fn, inputs: dict, rules, remat, mesh_config) -> dict:
    """Forward+backward of `model` on the XLA device under a sharding and remat preset.

    Returns loss, gradients (host copies), each parameter's sharding spec, the planned and the
    actual per-device shard shapes, and whether the graph holds a scan / a remat barrier.
    """
    import torch_xla
    from torch_xla.distributed.spmd.xla_sharding import wrap_as_sharded_tensor

    from core.backends.xla.spmd import build_mesh, shard_batch, shard_model
    from core.remat import apply_remat, unstack_weights

    mesh = build_mesh(mesh_config)
    apply_remat(model, remat)
    model = model.to(torch_xla.device())
    plan = shard_model(model, rules, mesh)
    loss = loss_fn(model, shard_batch(inputs, mesh))
    loss.backward()
    params = dict(model.named_parameters())
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([p.grad for p in params.values()])
    torch_xla.sync()
    return {
        "loss": loss.detach().cpu(),
        # per layer (HF names) even where a scanned stack keeps its weights stacked
        "grads": unstack_weights({n: p.grad.cpu() for n, p in params.items()}),
        "specs": {n: torch_xla._XLAC._get_xla_sharding_spec(p) for n, p in params.items()},
        "hlo_has_scan": "while" in hlo,  # scan lowers to an XLA while loop
        "hlo_has_remat": "opt-barrier" in hlo,  # torch_xla checkpoint fences its recompute
        # a scatter of single elements, which libtpu charges thousands of times its bytes:
        # what F.one_hot and the backward of gather and topk lower to (zoo/common/masks.py's
        # one_hot and picked); an embedding's backward scatters whole rows, which is cheap
        "hlo_has_element_scatter": re.search(r" scatter\([^\n]*update_window_dims=\{\}",
                                             hlo) is not None,
        "planned_shards": {e.name: e.shard_shape for e in plan},
        "actual_shards": {
            n: {tuple(s.data.shape) for s in wrap_as_sharded_tensor(p).local_shards}
            for n, p in params.items()
        },
    }


def assert_same_loss_and_grads(result: dict, reference: dict, tol: dict) -> None:
    torch.testing.assert_close(result["loss"], reference["loss"], **tol)
    for name, grad in reference["grads"].items():
        torch.testing.assert_close(result["grads"][name], grad, **tol, msg=name)
