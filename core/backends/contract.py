"""What a backend answers: the `Backend` protocol, every question the trainer (core/engine.py,
core/step.py), checkpoints (core/store/checkpoint.py) and the tasks' evaluation passes ask of
one. The backends implement it without naming it; mypy checks each against it where
`core.backends.get` returns one (tests/unit/test_types.py). A backend refuses in one line
what it cannot run."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

if TYPE_CHECKING:  # annotations only: importing the seam loads no torch
    from pathlib import Path

    import torch
    from torch.distributed.checkpoint.planner import LoadPlanner, SavePlanner

    from core.mesh import MeshConfig
    from core.profile import ProfileConfig
    from core.sharding import ParamPlan, ShardingRules

Batch: TypeAlias = "dict[str, torch.Tensor]"  # input name -> tensor, rows first
StepValues: TypeAlias = "dict[str, torch.Tensor]"  # loss, grad_norm and the task's metrics
StepArgs: TypeAlias = "tuple[int, StepValues, float, Batch]"  # (step, values, lr, batch)
StepDone: TypeAlias = "Callable[[int, StepValues, float, Batch], None]"  # takes StepArgs
Result = TypeVar("Result")


class RematPreset(Protocol):
    """What a backend reads of a remat preset: core.remat's RematConfig, which imports the
    xla backend's ops, so that this package cannot import it back."""

    @property
    def scan(self) -> list[str]:
        """The LayerStacks run with torch_xla's scan (empty: none)."""


class Profiler(Protocol):
    """The training loop's profiling calls, around each step and its parts."""

    def step_starts(self, step: int) -> None:
        """Step `step` (counting from 1) is about to begin."""

    def step_ended(self, step: int, last: bool) -> str | None:
        """Step `step` ended (`last`: the run's last); a line to log when a capture closed."""

    def region(self, name: str) -> AbstractContextManager[object]:
        """A named part of the step (data, step, checkpoint), marked in the capture."""


class Backend(Protocol):
    """How the engine's questions are answered: the processes and devices, how a model is
    placed and sharded, how a batch reaches the devices, how a step runs and when its
    values can be read, the RNG and the host copy a checkpoint writes."""

    @property
    def accumulates_in_loop(self) -> bool:
        """Whether grad_accum > 1 runs as `gradient_accumulation`'s one loop, not unrolled."""

    @property
    def one_console(self) -> bool:
        """Whether its processes share one console, where the first one speaks for all."""

    def device_count(self) -> int:
        """The run's devices, over all of its processes."""

    def process_index(self) -> int:
        """This process's index among the run's processes."""

    def process_count(self) -> int:
        """The run's processes."""

    def check_remat(self, remat: RematPreset) -> None:
        """Refuse, in one line, a remat preset it cannot run."""

    def prepare(self, model: torch.nn.Module, rules: ShardingRules, mesh_config: MeshConfig,
                bf16: bool) -> tuple[torch.nn.Module, list[ParamPlan], object, dict[str, int]]:
        """(model placed and sharded, parameter plan, mesh, its axis sizes): the mesh is the
        backend's own kind, for its `loader`; refuses a sharding preset it cannot express."""

    def loader(self, host_batches: Iterable[Batch], mesh: object, example: Batch, *,
               prefetch: bool = True) -> Iterator[Batch]:
        """This process's batches on its devices (`example`: one of the batches' shapes).
        `prefetch=False`: each host batch is drawn only when the loader is asked for it (the
        batches read the model, which the steps between change)."""

    def run(self, fn: Callable[..., Result], *args: Any) -> Result:
        """`fn(*args)`, a use of the model: a task's loss, a validation forward."""

    @property
    def loss_parts(self) -> int:
        """How many losses the gradient reduction averages: one per process where each
        computes its part of the batch, 1 where one program computes the whole batch."""

    def autocast(self, model: torch.nn.Module, bf16: bool) -> AbstractContextManager[object]:
        """The step's precision, for the step and any evaluation pass."""

    def gradient_accumulation(
            self, one_micro_batch: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]],
            micro: Sequence[torch.Tensor], model: torch.nn.Module,
            *carries: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Micro-batches as one loop, where `accumulates_in_loop`: the loss, then carries."""

    def after_step(self, done: StepDone, args: StepArgs) -> None:
        """Hand the step's values to `done` once they can be read."""

    def sync(self) -> None:
        """End an evaluation batch: what it queued runs now."""

    def total(self, value: torch.Tensor) -> torch.Tensor:
        """A sum over this process's rows made the sum over every process's."""

    def compile_stats(self) -> tuple[int, float]:
        """Graphs compiled so far in this process, and the seconds spent compiling them."""

    def peak_flops(self, dtype_name: str, devices: int) -> tuple[float, str]:
        """The peak FLOP/s of `devices` devices in `dtype_name`, and how it was found."""

    def profiler(self, config: ProfileConfig, run_dir: Path) -> Profiler:
        """The loop's profiler for `config` (profile.start_step, profile.steps)."""

    def materialize(self) -> None:
        """Run what is pending and wait for it: tensors can then be read or loaded into."""

    def rng_state(self) -> dict[str, Any]:
        """This process's RNG state, as a checkpoint saves it."""

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Restore an `rng_state`, either backend's."""

    def host_copy(self, state: dict[str, torch.Tensor]) -> dict[str, Any]:
        """This process's shards of `state` in host memory, what a background save writes."""

    def save_planner(self) -> SavePlanner | None:
        """DCP's planner for a checkpoint save (None: DCP's default)."""

    def load_planner(self) -> LoadPlanner | None:
        """DCP's planner for a checkpoint restore (None: DCP's default)."""

    # -- what the sampler (core/sampler) needs ------------------------------------------------
    def sampler_buffer(self, shape: tuple[int, ...], dtype: torch.dtype, spec: tuple,
                       mesh: object) -> torch.Tensor:
        """Zeros for a sampler's cache or decode state, [rows, ...] laid out as `spec`
        (logical axes, e.g. ("batch", None, "tensor", None)): this process's part of them on
        its devices, where the activations of those rows live."""

    def sampler_weights(self, model: torch.nn.Module, plan: list[ParamPlan], mesh: object,
                        bf16: bool) -> AbstractContextManager[object]:
        """The weights a sampler's call reads, in the call's precision (`autocast`'s), laid
        out for generating: read once a token by every step, so where a backend can it
        gathers their FSDP shards once a call rather than once a token."""

    def place_rows(self, batch: Batch, mesh: object) -> Batch:
        """Host tensors of every row ([rows, ...]) on the devices, split as the loader splits
        a batch."""

    def host_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's rows of a `place_rows`/`sampler_buffer` tensor, on the host."""
