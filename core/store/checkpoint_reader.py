"""A training checkpoint (core/store/checkpoint.py writes it) read offline: its full weights
on the host CPU, its `extra`, which steps a location holds. Never imports torch_xla, so
evaluation, export and `--init-from` run anywhere; the checkpointer's restore shares what
is here (the error type, the shape check).

`load_checkpoint` reads the model's shards (or `model.safetensors` when the run
consolidated its checkpoints) and assembles each full tensor in host memory; optimizer
state is not read.
"""

from __future__ import annotations

import contextlib
import json
import warnings

import safetensors.torch
import torch

from core.errors import UserError
from core.remat import unstack_weights
from core.store.location import Store
from core.store.manifest import MANIFEST, damage, is_committed
from core.store.run_folder import step_dir_name, step_of

WEIGHTS_FILE = "model.safetensors"
META_FILE = "meta.json"


class CheckpointError(UserError):
    """A checkpoint that is missing or does not fit the model/optimizer being restored."""


def complete_steps(location) -> list[int]:
    """Steps of the committed checkpoints at `location` (a path, URL or Store), ascending."""
    store = location if isinstance(location, Store) else Store(location)
    steps = [(step_of(name), name) for name in store.children()]
    return sorted(step for step, name in steps
                  if step is not None and is_committed(store / name))


def load_checkpoint(path) -> dict[str, torch.Tensor]:
    """Full (unsharded) weights by per-layer (Hugging Face) state_dict name, needing no
    torch_xla: a scanned stack's stacked weights are split into its layers.

    `path` (a local path or a URL) is a checkpoint folder (`.../step-N`), a checkpoint
    location, or a run folder whose checkpoints are in `checkpoints/` (the trainer's default);
    the latter two give the newest complete checkpoint.
    """
    store = Store(path)
    if _is_checkpoint(store):
        return unstack_weights(_read_weights(store))
    in_run = store / "checkpoints"
    for folder in (store, in_run):
        steps = complete_steps(folder)
        if steps:
            return unstack_weights(_read_weights(folder / step_dir_name(steps[-1])))
    raise CheckpointError(
        f"{path} is neither a checkpoint folder (no {WEIGHTS_FILE} or shards) nor a folder "
        f"with complete step-NNNNNNNN checkpoints (directly or in {in_run.name}/)"
    )


def saved_extra(folder) -> dict:
    """The `extra` a checkpoint folder was saved with."""
    return json.loads(Store(folder).read_text(META_FILE))["extra"]


def first_misfit(model: dict[str, list[int]], saved: dict[str, list[int]],
                 required: set[str] | None = None) -> str | None:
    """The first tensor by which `saved` shapes (a checkpoint's) do not fit `model` shapes,
    in words; None when they fit. `required`: the model's names a checkpoint must hold (by
    default all; a tied weight may be absent)."""
    for name in sorted(model):
        if name not in saved:
            if required is None or name in required:
                return f"'{name}' is in the model but not in the checkpoint"
        elif saved[name] != model[name]:
            return (f"'{name}' has shape {saved[name]} in the checkpoint but {model[name]} "
                    "in the model")
    extra = sorted(set(saved) - set(model))
    return f"'{extra[0]}' is in the checkpoint but not in the model" if extra else None


@contextlib.contextmanager
def quiet_single_process():
    """Silence warnings about torch/torch_xla internals that users cannot act on: DCP without
    a process group (our single-process case), its planner signature, storage deprecations."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        warnings.filterwarnings(
            "ignore", category=UserWarning, module=r"torch(_xla)?\.(distributed|storage)"
        )
        warnings.filterwarnings("ignore", message=".*TypedStorage is deprecated")
        yield


def _is_checkpoint(folder: Store) -> bool:
    """A committed checkpoint folder (its manifest then says what is damaged in it)."""
    return any(folder.exists(name) for name in (WEIGHTS_FILE, ".metadata", MANIFEST))


def check_whole(folder: Store) -> None:
    """Refused in one line unless `folder` holds every file its manifest lists, at its size:
    checked before its weights are read, or before anything is built to receive them."""
    problem = damage(folder)
    if problem is not None:
        raise CheckpointError(f"checkpoint {folder} is damaged: {problem}; use an older "
                              "checkpoint of the run (checkpoints/step-N)")


def _read_weights(folder: Store) -> dict[str, torch.Tensor]:
    """The consolidated file when there is one; otherwise the `model.` entries of the DCP
    shards, assembled into full tensors on the host (optimizer state is not read)."""
    check_whole(folder)
    if folder.exists(WEIGHTS_FILE):
        return safetensors.torch.load(folder.read_bytes(WEIGHTS_FILE))
    import torch.distributed.checkpoint as dcp  # start-up
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader  # start-up
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata  # start-up

    reader = FsspecReader(folder.url)
    saved = {name: meta for name, meta in reader.read_metadata().state_dict_metadata.items()
             if name.startswith("model.") and isinstance(meta, TensorStorageMetadata)}
    for name, meta in saved.items():
        if sum(chunk.sizes.numel() for chunk in meta.chunks) < meta.size.numel():
            raise CheckpointError(
                f"checkpoint {folder} holds only part of {name.removeprefix('model.')} (a "
                "checkpoint on one host's own disk); export from checkpoints every host wrote "
                "to one place (a gs:// bucket), or train with consolidate_checkpoints=true"
            )
    state = {name: torch.empty(meta.size, dtype=meta.properties.dtype)
             for name, meta in saved.items()}
    with quiet_single_process():
        dcp.load(state, storage_reader=reader, no_dist=True)
    return {name.removeprefix("model."): tensor for name, tensor in state.items()}
