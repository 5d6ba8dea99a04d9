"""The dtensor backend: upstream torch.distributed, one process per device.

torchrun starts the processes (`zoo train --backend dtensor --nproc N` uses its launcher);
each joins one process group (gloo on CPUs; gloo for CPU tensors and NCCL for GPU tensors
on GPUs), builds a DeviceMesh with zoo's axis names and shards the model with FSDP2's
`fully_shard`: each repeated block (a LayerStack's layers) is a unit of its own, each
parameter split on the dimension its preset gives the fsdp axis, and a `data` axis becomes
HSDP's replicate dimension. bf16 runs keep fp32 masters and gather bf16 (FSDP2's
MixedPrecisionPolicy, the xla backend's core/precision.py policy). On a GPU each block is
compiled with `torch.compile`. Checkpoints are DCP folders with the xla backend's names and
global shapes, so either backend restores the other's.

What it cannot run is refused in one line: the tensor, sequence and expert axes (an FSDP2
mesh has data and fsdp only), slices over DCN, and torch_xla's scan. TorchTPU runs this
same program on TPUs (device "tpu", process group backend "tpu_dist"); that machine was
not available to test, so the device here is a GPU when one is visible, else the CPU."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch._dynamo import utils as dynamo_utils
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Shard

from core.attention import use_fused_kernels
from core.backends.contract import Batch, RematPreset, Result, StepArgs, StepDone, StepValues
from core.errors import UserError
from core.mesh import resolve_axis_sizes
from core.sharding import axes_of, plan_params

if TYPE_CHECKING:
    from pathlib import Path

    from torch.distributed.device_mesh import DeviceMesh

    from core.mesh import MeshConfig
    from core.profile import ProfileConfig
    from core.sharding import ParamPlan, ShardingRules

MESH_AXES = ("data", "fsdp")  # what an FSDP2 (HSDP) mesh expresses
# Dense bf16 peak FLOP/s per GPU from the vendors' data sheets (SXM parts), by name prefix.
GPU_BF16_PEAK = {"NVIDIA H200": 989e12, "NVIDIA H100": 989e12, "NVIDIA A100": 312e12,
                 "NVIDIA B200": 2250e12}


class DTensorBackend:
    name = "dtensor"
    accumulates_in_loop = False  # micro-batches unrolled in Python: eager ops, no trace
    one_console = True  # torchrun's processes share the launcher's: the first one speaks
    places_one_model = True  # prepare() keeps the model's FSDP root: no second model beside it

    @property
    def loss_parts(self) -> int:
        """Each process's loss is its rows' (FSDP2's gradient reduction averages them)."""
        return dist.get_world_size()

    def __init__(self) -> None:
        if "RANK" not in os.environ:  # one process not started by torchrun: a group of one
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                              MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
        if torch.cuda.is_available():
            self.device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
            torch.cuda.set_device(self.device)
            group_backend = "cpu:gloo,cuda:nccl"
        else:
            self.device = torch.device("cpu")
            group_backend = "gloo"
        if not dist.is_initialized():
            dist.init_process_group(group_backend)

    def device_count(self) -> int:
        return dist.get_world_size()

    def process_index(self) -> int:
        return dist.get_rank()

    def process_count(self) -> int:
        return dist.get_world_size()

    def check_remat(self, remat: RematPreset) -> None:
        if remat.scan:
            raise UserError("remat presets that scan a layer stack use torch_xla's scan; "
                            "with --backend dtensor use remat=none or remat=checkpoint")

    def prepare(self, model: torch.nn.Module, rules: ShardingRules, mesh_config: MeshConfig,
                bf16: bool) -> tuple[torch.nn.Module, list[ParamPlan], DeviceMesh, dict[str, int]]:
        """(model sharded with fully_shard on this process's device, the parameter plan, the
        DeviceMesh, its axis sizes)."""
        if any(size > 1 for size in mesh_config.dcn.values()):
            raise UserError("--backend dtensor runs on one slice; slices over DCN (mesh.dcn) "
                            "need --backend xla")
        sizes = resolve_axis_sizes(mesh_config, self.device_count())
        other = {axis: n for axis, n in sizes.items() if n > 1 and axis not in MESH_AXES}
        if other:
            raise UserError(f"--backend dtensor shards over data and fsdp only (FSDP2); mesh "
                            f"{other} needs --backend xla")
        plan = plan_params(model, rules, sizes)
        use_fused_kernels()
        mesh = init_device_mesh(self.device.type, tuple(sizes[a] for a in MESH_AXES),
                                mesh_dim_names=MESH_AXES)
        shard_dims = _fsdp_dims(model, plan)
        model = model.to(self.device)
        blocks = repeated_blocks(model)
        if self.device.type == "cuda":
            for block in blocks:
                block.compile()
        options: dict[str, Any] = {
            # data > 1: HSDP, replicated over data and sharded over fsdp
            "mesh": mesh if sizes["data"] > 1 else mesh["fsdp"],
            "shard_placement_fn": lambda param: _shard(shard_dims.get(id(param), 0)),
            "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                              reduce_dtype=torch.float32) if bf16
            else MixedPrecisionPolicy(),
        }
        for block in blocks:
            for table in _tables_in(block):
                fully_shard(table, **options)
            fully_shard(block, **options)
        self.root = fully_shard(_Root(model), **options)
        return model, plan, mesh, {a: sizes[a] for a in MESH_AXES}

    def run(self, fn: Callable[..., Result], *args: Any) -> Result:
        """`fn(*args)`, a use of the model (a task's loss, a validation forward), as the
        forward of FSDP2's root: the weights outside the blocks (embeddings, final norm,
        head) are gathered around it whichever methods of the model it calls."""
        # fully_shard returns the _Root itself, its class made a subclass of FSDPModule too;
        # torch types the result as the FSDPModule mixin alone, which is not callable
        result = self.root(fn, *args)  # type: ignore[operator]
        if not torch.is_grad_enabled():  # no backward will reshard the root's weights, and
            self.root.reshard()  # gathered ones are not the parameters the optimizer holds
        return result

    def sync(self) -> None:
        return None  # eager: each op has run

    def total(self, value: torch.Tensor) -> torch.Tensor:
        """A sum over this process's rows made the sum over every process's."""
        value = value.clone()
        dist.all_reduce(value)
        return value

    def profiler(self, config: ProfileConfig, run_dir: Path) -> _NoProfile:
        if config.start_step:
            raise UserError("profile.start_step captures an XLA profile; the dtensor backend "
                            "has no profiler yet: run torch.profiler around `zoo train`")
        return _NoProfile()

    def loader(self, host_batches: Iterable[Batch], mesh: object, example: Batch, *,
               prefetch: bool = True) -> Iterator[Batch]:
        for batch in host_batches:  # each drawn when asked: there is no prefetch to turn off
            yield {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def autocast(self, model: torch.nn.Module, bf16: bool) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()  # FSDP2's mixed precision policy casts the weights

    def sampler_weights(self, model: torch.nn.Module, plan: list[ParamPlan], mesh: object,
                        bf16: bool) -> contextlib.nullcontext[None]:
        return self.autocast(model, bf16)  # FSDP2 gathers each module's weights as it runs

    def gradient_accumulation(
            self, one_micro_batch: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]],
            micro: Sequence[torch.Tensor], model: torch.nn.Module,
            *carries: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Never asked for (accumulates_in_loop is False): micro-batches run unrolled."""
        raise NotImplementedError("the dtensor backend unrolls micro-batches (core/step.py)")

    def after_step(self, done: StepDone, args: StepArgs) -> None:
        """The step has run (eager): `done` gets its values over all processes (each
        process's loss and metrics are means over its rows; their mean is the batch's)."""
        step, values, lr, batch = args
        done(step, _global_values(values, dist.get_world_size()), lr, batch)

    def compile_stats(self) -> tuple[int, float]:
        """Graphs torch.compile made so far, and the seconds spent making them (forward
        frames, and backward graphs, which AOTAutograd compiles at the first backward)."""
        seconds = dynamo_utils.cumulative_time_spent_ns.get("entire_frame_compile", 0) / 1e9
        seconds += sum(sum(times) for name, times in dynamo_utils.compilation_time_metrics.items()
                       if "bw_compiler" in name)
        return int(dynamo_utils.counters["stats"]["unique_graphs"]), seconds

    def peak_flops(self, dtype_name: str, devices: int) -> tuple[float, str]:
        if self.device.type == "cuda":
            name = torch.cuda.get_device_name(self.device)
            per_gpu = gpu_bf16_peak(name)
            return per_gpu * devices, (f"{devices} x {name}'s dense bf16 peak, "
                                       f"{per_gpu / 1e12:.0f} TFLOP/s each")
        peak = _cpu_matmul_peak(getattr(torch, dtype_name))
        return peak, (f"this host's eager {dtype_name} matmul peak {peak / 1e9:.0f} GFLOP/s, "
                      f"measured now in {devices} processes at once")

    # -- what a checkpoint needs -------------------------------------------------------------
    def materialize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def rng_state(self) -> dict[str, Any]:
        state = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def set_rng_state(self, state: dict[str, Any]) -> None:
        torch.set_rng_state(state["torch"])
        if self.device.type == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], self.device)

    def host_copy(self, state: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Each process's own shards copied to host memory, as DTensors with the originals'
        layout (what a background write reads while training changes the originals)."""
        def copied(value: torch.Tensor) -> torch.Tensor:
            if not isinstance(value, DTensor):
                return value.detach().cpu().clone()
            local = value.to_local().detach().cpu().clone()
            return DTensor.from_local(local, value.device_mesh, value.placements,
                                      run_check=False, shape=value.shape, stride=value.stride())

        return {k: copied(v) for k, v in state.items()}

    # -- what the sampler needs ----------------------------------------------------------------
    def sampler_buffer(self, shape: tuple[int, ...], dtype: torch.dtype, spec: tuple,
                       mesh: object) -> torch.Tensor:
        """This process's contiguous share of the rows, local on its device (FSDP2's
        activations are local: the cache of a row lives with the row)."""
        return torch.zeros(self._own_rows(shape[0]), *shape[1:], dtype=dtype,
                           device=self.device)

    def place_rows(self, batch: Batch, mesh: object) -> Batch:
        return {key: value[self._row_slice(value.shape[0])].to(self.device)
                for key, value in batch.items()}

    def host_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's rows, in process order, on the host."""
        if tensor.dtype == torch.bool:  # gloo gathers no bools
            return self.host_rows(tensor.to(torch.uint8)).bool()
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts).cpu()

    def _own_rows(self, rows: int) -> int:
        world = dist.get_world_size()
        if rows % world:
            raise UserError(f"the sampler's {rows} rows do not split over {world} processes; "
                            f"give a multiple of {world}")
        return rows // world

    def _row_slice(self, rows: int) -> slice:
        own = self._own_rows(rows)
        return slice(dist.get_rank() * own, (dist.get_rank() + 1) * own)

    def save_planner(self) -> None:
        return None  # DCP's default planner: DTensor shards, replicas written once

    def load_planner(self) -> None:
        return None


def gpu_bf16_peak(name: str) -> float:
    """A GPU's dense bf16 peak FLOP/s, by its CUDA device name."""
    for prefix, peak in GPU_BF16_PEAK.items():
        if name.startswith(prefix):
            return peak
    raise UserError(f"no bf16 peak is known for a {name}; add it to GPU_BF16_PEAK in "
                    "core/backends/dtensor.py")


def repeated_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The layers of every stack of identical layers (zoo's LayerStack, transformers'
    `layers` ModuleList): FSDP2 units and torch.compile regions."""
    blocks: list[torch.nn.Module] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > 1:
            if len({type(layer) for layer in module}) == 1:
                blocks.extend(module)
    return blocks


class _NoProfile:
    """The loop's profiling calls, answered with nothing."""

    def step_starts(self, step: int) -> None:
        return None

    def step_ended(self, step: int, last: bool) -> None:
        return None

    def region(self, name: str) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


class _Root(torch.nn.Module):
    """The model under a root whose forward runs any function of it: tasks call the model's
    own methods (`hidden_states`, `logits`, ...), which FSDP2 does not hook."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


def _tables_in(block: torch.nn.Module) -> list[torch.nn.Module]:
    """A block's lookup tables, each an FSDP unit of its own: a stack may read one outside
    its layer's forward (T5 computes every layer's position bias from layer 0's table)."""
    return [m for m in block.modules() if isinstance(m, torch.nn.Embedding)]


def _fsdp_dims(model: torch.nn.Module, plan: list[ParamPlan]) -> dict[int, int]:
    """id(parameter) -> the dimension its preset splits over fsdp (absent: dim 0, where
    FSDP shards every parameter its preset replicates)."""
    params = dict(model.named_parameters())
    dims: dict[int, int] = {}
    for entry in plan:
        for dim, axes in enumerate(entry.spec):
            if "fsdp" in axes_of(axes):
                dims[id(params[entry.name])] = dim
    return dims


def _shard(dim: int) -> Shard:
    return Shard(dim)


def _global_values(values: StepValues, world: int) -> StepValues:
    """Per-process scalars averaged over the processes in one all-reduce; DTensors (the
    gradient norm) made whole."""
    whole = {k: v.full_tensor() for k, v in values.items() if isinstance(v, DTensor)}
    local = {k: v.detach().float().reshape(()) for k, v in values.items() if k not in whole}
    if local and world > 1:
        stacked = torch.stack(list(local.values()))
        dist.all_reduce(stacked)
        local = dict(zip(local, (stacked / world).unbind()))
    return {**local, **whole}


def _cpu_matmul_peak(dtype: torch.dtype, size: int = 1024, seconds: float = 0.5) -> float:
    """The whole host's eager matmul FLOP/s, every process measuring at once and summed."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b  # warm-up
    dist.barrier()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    rate = torch.tensor([2.0 * size**3 * count / (time.perf_counter() - start)])
    dist.all_reduce(rate)
    return float(rate)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
