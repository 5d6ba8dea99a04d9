"""The run's schema: `TrainConfig`, the keys every run has (each task's config extends it,
zoo/app/run.py adds the family's `model`), apart from the loop that reads it, so a task or
a tool names the schema without importing the trainer.

What a key is for beyond its type and default is metadata on its field, written with
`setting(...)` and read here, never a list of names kept elsewhere:

- `resumable`: the key may differ when a run folder with checkpoints is resumed (how long
  and how often, where it runs and logs); any other changed key is another experiment. On a
  section (`mesh`, `wandb`) it covers every key in it.
- `from_slice`: the key's default is raised to suit the slice the run is on, unless the
  user gives it; the value is `f(default, mesh axis sizes) -> value`.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator

import fsspec

from core.inputs import batch_devices
from core.lora import LoraConfig
from core.mesh import MeshConfig
from core.metrics import WandbConfig
from core.nan_guard import NAN_POLICIES
from core.optim import OptimConfig, ScheduleConfig
from core.profile import ProfileConfig
from core.store.run_folder import CHECKPOINTS
from core.store.run_home import RunHome
from core.topology import Topology

RESUMABLE = "resumable"
FROM_SLICE = "from_slice"

SliceDefault = Callable[[int, dict[str, int]], int]


def setting(default=dataclasses.MISSING, *, factory=dataclasses.MISSING,
            resumable: bool = False, from_slice: SliceDefault | None = None):
    """A config field (`default`, or a `factory` for a section or list) with what the run
    does with it: see this module's docstring."""
    metadata = {RESUMABLE: resumable, **({FROM_SLICE: from_slice} if from_slice else {})}
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata)


def one_row_per_device(configured: int, mesh: dict[str, int]) -> int:
    """The config's default batch (a CPU-sized 8 or 32), raised to one example per
    data-parallel device on a slice with more: a smaller batch leaves XLA padding every
    device's share, compute spent on nothing (and a slow, odd SPMD program)."""
    return max(configured, batch_devices(mesh))


@dataclasses.dataclass
class TrainConfig:
    model_name: str = ""
    # the slice type the run is meant for; checked against the runtime
    tpu: str = setting("cpu", resumable=True)
    steps: int = setting(100, resumable=True)
    global_batch_size: int = setting(8, from_slice=one_row_per_device)
    grad_accum: int = 1  # micro-batches per optimizer step (global batch split evenly)
    precision: str = "auto"  # auto (bf16 on TPU, fp32 elsewhere) | fp32 | bf16
    seed: int = 0
    out: str = setting("runs/run", resumable=True)
    log_every: int = setting(10, resumable=True)
    checkpoint_every: int = setting(50, resumable=True)
    keep_checkpoints: int = setting(3, resumable=True)
    # where checkpoints go: a path or URL (gs://bucket/path) every host sees, or a path on
    # each host's own disk; empty: RUN/checkpoints
    checkpoint_dir: str = setting("", resumable=True)
    # a run holds its checkpoint location with a heartbeat; one silent this long was left by
    # a process that is gone (a preempted VM) and is taken over (core/store/lease.py)
    checkpoint_lease_s: float = setting(120.0, resumable=True)
    # write checkpoints on a background thread; training stalls only to copy to host memory
    async_checkpoints: bool = setting(True, resumable=True)
    # also write full unsharded weights (model.safetensors) with every checkpoint: a gather
    # of every tensor into each host's memory; export and eval read the shards without it
    consolidate_checkpoints: bool = setting(False, resumable=True)
    # a step whose loss or gradient norm is not finite: stop (the last checkpoint is kept)
    # or skip (weights and optimizer state left as they were); core/nan_guard.py
    nan_policy: str = "stop"
    sharding: str = "fsdp"  # preset name in the model family's sharding/ folder
    remat: str = "none"  # preset name in the model family's remat/ folder
    init_from: str | None = None  # Hugging Face checkpoint directory to start from
    lora: LoraConfig = dataclasses.field(default_factory=LoraConfig)  # adapters on a frozen base
    mesh: MeshConfig = setting(factory=MeshConfig, resumable=True)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    wandb: WandbConfig = setting(factory=WandbConfig, resumable=True)
    profile: ProfileConfig = setting(factory=ProfileConfig, resumable=True)

    def runs_in_bf16(self, topo: Topology) -> bool:
        """precision=auto means bf16 autocast on TPU, fp32 elsewhere."""
        return self.precision == "bf16" or (self.precision == "auto" and topo.is_tpu)

    @property
    def checkpoint_location(self) -> str:
        return self.checkpoint_dir or RunHome(self.out).path(CHECKPOINTS)

    def __post_init__(self):
        _check_location("checkpoint_dir", self.checkpoint_dir)
        _check_location("out", self.out)
        counts = ("steps", "global_batch_size", "grad_accum", "log_every", "checkpoint_every",
                  "keep_checkpoints")
        for name in counts:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if not self.checkpoint_lease_s > 0 or self.checkpoint_lease_s == float("inf"):
            raise ValueError(f"checkpoint_lease_s must be a positive number of seconds, "
                             f"not {self.checkpoint_lease_s}")
        if self.nan_policy not in NAN_POLICIES:
            raise ValueError(f"nan_policy must be {' or '.join(NAN_POLICIES)}, "
                             f"not {self.nan_policy}")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ValueError(f"precision must be auto, fp32 or bf16, not {self.precision}")
        if self.global_batch_size % self.grad_accum:
            raise ValueError(
                f"global_batch_size ({self.global_batch_size}) must be a multiple "
                f"of grad_accum ({self.grad_accum})"
            )


def _check_location(key: str, url: str) -> None:
    """A URL (for `out` or `checkpoint_dir`) whose filesystem fsspec cannot use, or that does
    not outlive the process, fails with the config."""
    if "://" not in url:
        return
    protocol = url.split("://", 1)[0]
    if protocol == "memory":
        raise ValueError(f"{key} {url}: an in-memory location vanishes when the run exits, "
                         "and its checkpoints with it; use a local path or gs://bucket/path")
    try:
        fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as error:
        raise ValueError(f"{key} {url}: {error}; use a local path or "
                         "gs://bucket/path") from None


def schema_keys(schema: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, type]]:
    """(dotted key, field, type) for every key of a schema, a section before its keys."""
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        key, kind = f"{prefix}{field.name}", hints[field.name]
        yield key, field, kind
        if dataclasses.is_dataclass(kind):
            yield from schema_keys(kind, f"{key}.")


def resumable(schema: type) -> tuple[str, ...]:
    """The keys of `schema` a resumed run may change, as `str.startswith` takes them: `name`
    for a key, `name.` for a section (every key under it: `mesh.dcn.data` under `mesh.`)."""
    marked = [(key, kind) for key, field, kind in schema_keys(schema)
              if field.metadata.get(RESUMABLE)]
    return tuple(f"{key}." if dataclasses.is_dataclass(kind) else key for key, kind in marked)


def slice_defaults(schema: type) -> dict[str, SliceDefault]:
    """{top-level key: how the slice raises its default} for the keys marked `from_slice`."""
    return {field.name: field.metadata[FROM_SLICE] for field in dataclasses.fields(schema)
            if FROM_SLICE in field.metadata}
