"""The xla backend: torch_xla's SPMD, one process per host driving all of its devices with
one global program, traced once and replayed (TPU VMs; XLA:CPU's virtual devices here).
Implements core/backends/contract.py's Backend, whose methods say what each one answers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch

from core.backends.contract import Batch, RematPreset, Result, StepArgs, StepDone
from core.backends.xla.cpu_peak import remembered_cpu_peak
from core.backends.xla.profile import StepProfiler
from core.backends.xla.runtime import compile_stats, sync, sync_and_wait
from core.backends.xla.sampler_weights import gathered_copies
from core.backends.xla.spmd import (
    build_mesh,
    device_loader,
    gathered_on_host,
    sampler_zeros,
    shard_batch,
    shard_model,
)
from core.errors import UserError
from core.mesh import axis_sizes
from core.out_of_memory import parse_out_of_memory
from core.precision import compute_in

if TYPE_CHECKING:
    from pathlib import Path

    from torch.distributed.checkpoint.planner import LoadPlanner, SavePlanner

    from core.mesh import MeshConfig
    from core.profile import ProfileConfig
    from core.sharding import ParamPlan, ShardingRules


class XlaBackend:
    name = "xla"
    accumulates_in_loop = True  # grad_accum > 1 as one XLA while loop
    one_console = False  # each host logs to its own console
    places_one_model = False  # prepare() keeps nothing: a frozen reference model may sit beside
    loss_parts = 1  # one global program: the loss is already the whole batch's

    def device_count(self) -> int:
        import torch_xla.runtime as xr  # torch_xla

        return xr.global_runtime_device_count()

    def process_index(self) -> int:
        import torch_xla.runtime as xr  # torch_xla

        return xr.process_index()

    def process_count(self) -> int:
        import torch_xla.runtime as xr  # torch_xla

        return xr.process_count()

    def check_remat(self, remat: RematPreset) -> None:
        return None  # scan and every policy are torch_xla's own

    def prepare(self, model: torch.nn.Module, rules: ShardingRules, mesh_config: MeshConfig,
                bf16: bool) -> tuple[torch.nn.Module, list[ParamPlan], object, dict[str, int]]:
        """(model on the XLA device, each parameter marked with its preset's sharding, the
        parameter plan, the SPMD mesh, its axis sizes)."""
        import torch_xla  # torch_xla

        mesh = build_mesh(mesh_config)
        model = model.to(torch_xla.device())
        return model, shard_model(model, rules, mesh), mesh, axis_sizes(mesh)

    def run(self, fn: Callable[..., Result], *args: Any) -> Result:
        """`fn(*args)`, a use of the model: traced into the step's graph."""
        return fn(*args)

    def sync(self) -> None:
        """Cut the graph traced so far and run it (one graph per evaluation batch)."""
        sync()

    def total(self, value: torch.Tensor) -> torch.Tensor:
        return value  # SPMD tensors are global: their sums are already every host's

    def profiler(self, config: ProfileConfig, run_dir: Path) -> StepProfiler:
        return StepProfiler(config, run_dir)

    def loader(self, host_batches: Iterable[Batch], mesh: object, example: Batch, *,
               prefetch: bool = True) -> Iterator[Batch]:
        if prefetch:  # torch_xla's loader: batches drawn and sent ahead in a thread
            return device_loader(host_batches, mesh, example)
        return (shard_batch(batch, mesh) for batch in host_batches)

    def autocast(self, model: torch.nn.Module, bf16: bool) -> AbstractContextManager[object]:
        return compute_in(model, torch.bfloat16 if bf16 else torch.float32)

    def gradient_accumulation(
            self, one_micro_batch: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]],
            micro: Sequence[torch.Tensor], model: torch.nn.Module,
            *carries: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        from torch_xla.experimental.gradient_accumulation import gradient_accumulation  # torch_xla

        return gradient_accumulation(one_micro_batch, micro, model, *carries)

    def after_step(self, done: StepDone, args: StepArgs) -> None:
        """Run the traced step; `done(*args)` reads its values once the graph has run."""
        import torch_xla.core.xla_model as xm  # torch_xla

        xm.add_step_closure(done, args=args)
        _sync_step()

    def compile_stats(self) -> tuple[int, float]:
        return compile_stats()

    def peak_flops(self, dtype_name: str, devices: int) -> tuple[float, str]:
        """This host's matmul peak through XLA, remembered for a day (cpu_peak.py here)."""
        peak, measured_at = remembered_cpu_peak(dtype_name, devices)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(measured_at))
        return peak, (f"this host's {dtype_name} matmul peak {peak / 1e9:.0f} GFLOP/s, "
                      f"measured {when} (shared by {devices} virtual devices)")

    # -- what a checkpoint needs -------------------------------------------------------------
    def materialize(self) -> None:
        """Run pending lazy computations and wait for them: tensors can be read after."""
        sync_and_wait()

    def rng_state(self) -> dict[str, Any]:
        # Every sync advances torch_xla's RNG seed: read right after `materialize`, a resumed
        # run then draws exactly what the saving run draws next.
        import torch_xla.core.xla_model as xm  # torch_xla

        return {"torch": torch.get_rng_state(), "xla": xm.get_rng_state()}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        import torch_xla.core.xla_model as xm  # torch_xla

        self.materialize()
        torch.set_rng_state(state["torch"])
        if "xla" in state:  # not in a checkpoint the dtensor backend wrote
            xm.set_rng_state(state["xla"])  # last: a sync after this would advance the seed

    def host_copy(self, state: dict[str, torch.Tensor]) -> dict[str, Any]:
        """A copy of the state in host memory: each XLA tensor's local shards (no gather), CPU
        tensors cloned. What a background write reads while training changes the originals."""
        # torch_xla
        from torch_xla.experimental.distributed_checkpoint._helpers import (
            _sharded_cpu_state_dict,
        )

        on_device = {k: v for k, v in state.items() if v.device.type == "xla"}
        copied = {k: _first_replicas(v) for k, v in
                  (_sharded_cpu_state_dict(on_device) if on_device else {}).items()}
        return {k: copied[k] if k in copied else v.detach().clone() for k, v in state.items()}

    def save_planner(self) -> SavePlanner:
        from torch_xla.experimental.distributed_checkpoint import SPMDSavePlanner  # torch_xla

        return SPMDSavePlanner()

    def load_planner(self) -> LoadPlanner:
        from torch_xla.experimental.distributed_checkpoint import SPMDLoadPlanner  # torch_xla

        return SPMDLoadPlanner()

    # -- what the sampler needs ----------------------------------------------------------------
    def sampler_buffer(self, shape: tuple[int, ...], dtype: torch.dtype, spec: tuple,
                       mesh: object) -> torch.Tensor:
        return sampler_zeros(shape, dtype, spec, mesh)

    def sampler_weights(self, model: torch.nn.Module, plan: list[ParamPlan], mesh: object,
                        bf16: bool) -> AbstractContextManager[object]:
        return gathered_copies(model, plan, mesh, torch.bfloat16 if bf16 else torch.float32)

    def place_rows(self, batch: Batch, mesh: object) -> Batch:
        if self.process_count() > 1:
            raise UserError("the sampler on the xla backend runs on one host; a slice of "
                            f"{self.process_count()} hosts cannot sample yet")
        return shard_batch(batch, mesh)

    def host_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """The global tensor on the host (SPMD tensors are global), from its shards: read
        after a sync, it compiles nothing."""
        return gathered_on_host(tensor)


def _first_replicas(value: Any) -> Any:
    """Shards of a tensor split on some mesh axes and replicated on others (FSDP under
    data parallelism, or over slices), each chunk kept once: as replica 0, held by exactly
    one device of the job. torch_xla's save planner dedups a chunk that one process offers
    twice by dropping every copy: with mesh.data=2 on one host, each sharded weight and
    its optimizer moments were missing from the checkpoint."""
    from torch_xla.experimental.distributed_checkpoint._helpers import _CpuShards  # torch_xla

    if not isinstance(value, _CpuShards):
        return value
    return _CpuShards([s for s in value.shards if s.replica_id == 0], value.global_shape)


def _sync_step() -> None:
    """Run the step's graph. The first one is compiled here: a step the TPU compiler
    refuses for memory stops the run in one line, before anything is saved."""
    import torch_xla  # torch_xla

    try:
        torch_xla.sync()
    except RuntimeError as error:
        refusal = parse_out_of_memory(str(error), 0.0)
        if refusal is None:
            raise
        raise UserError(refusal.message(
            "; `zoo plan MODEL --tpu SLICE --compile` checks a setting without a TPU")) from None
