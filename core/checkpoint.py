"""Resumable sharded checkpoints for SPMD training, plus a consolidated weights file.

Each complete checkpoint is one folder under the run's checkpoint directory:

    DIR/step-00000040/
        .metadata, __*_*.distcp   torch.distributed.checkpoint (DCP) shards, written by every
                                  process with torch_xla's SPMD planners: `model.<name>` for
                                  model.state_dict(), `optim.<param name>.<key>` for each
                                  optimizer state tensor (exp_avg, exp_avg_sq, step, ...)
        trainer.pt                optimizer param groups (by parameter name), LR scheduler
        rng-00000.pt              per process: torch CPU and torch_xla RNG states
        model.safetensors         only with consolidate=True: full unsharded weights by
                                  state_dict (Hugging Face) name
        meta.json                 step, data position, `extra`, process/device counts
        manifest.json             every file's size and checksum (core/checkpoint_manifest.py)
    DIR/.tmp-step-00000050/       a save in progress or a crashed one: never read
    DIR/step-00000060.damaged/    a checkpoint that failed its manifest, moved aside, kept

A save writes into `.tmp-step-N` and renames it to `step-N` only after every process has
finished writing, so a folder named `step-N` is always complete; a crash mid-save leaves the
previous checkpoint as the latest, and the next save removes the leftover. Old checkpoints
beyond `keep` are renamed to `.trash-*` (atomically) before being deleted. A save that fails
for lack of disk space (or any OS error) removes its partial folder and says so in one line.
Resuming takes the newest checkpoint that matches its manifest; a damaged newer one is moved
aside as `step-N.damaged`, never deleted.

Optimizer state is keyed by parameter name and restored without a training step: `restore`
reads the checkpoint's metadata, allocates zero tensors of the saved shapes (the ones shaped
like their parameter on the parameter's device, with its sharding), loads into them in place
and hands the result to `optimizer.load_state_dict`.

`load_checkpoint` reads the model's shards (or `model.safetensors`) on the host CPU and never
imports torch_xla, so evaluation and export run anywhere. Consolidating at save time is off by
default: it gathers every full tensor into every host's memory (280 GB for a 70B model in
fp32) on each save. The rest imports torch_xla lazily, inside the methods.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import warnings
from itertools import zip_longest
from pathlib import Path

import torch

from zoo.core.checkpoint_manifest import damage, write_manifest
from zoo.core.errors import UserError
from zoo.core.hosts import current as current_hosts
from zoo.core.run_folder import RunFolder, step_dir_name, step_of

_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"
WEIGHTS_FILE = "model.safetensors"
_META_FILE = "meta.json"
_TRAINER_FILE = "trainer.pt"


class CheckpointError(UserError):
    """A checkpoint that is missing or does not fit the model/optimizer being restored."""


def complete_steps(directory: str | Path) -> list[int]:
    """Steps of the complete checkpoints in `directory`, ascending (tmp/trash folders ignored)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    steps = [step_of(child.name) for child in directory.iterdir() if child.is_dir()]
    return sorted(step for step in steps if step is not None)


class Checkpointer:
    """Periodic sharded saves into `directory`, keeping the newest `keep` complete ones.

    Every host calls `save`/`restore` at the same step (SPMD programs are global); hosts
    coordinate over `zoo.core.hosts` (a gloo group on a slice). `save` is synchronous and
    installs no signal handlers: call it from the training loop, e.g. once the hosts have
    agreed to stop.
    """

    def __init__(self, directory: str | Path, keep: int = 3, consolidate: bool = False):
        if keep < 1:
            raise CheckpointError(f"checkpoint keep must be at least 1, got {keep}")
        self.directory = Path(directory)
        self.keep = keep
        self.consolidate = consolidate

    def latest_step(self) -> int | None:
        steps = complete_steps(self.directory)
        return steps[-1] if steps else None

    def path(self, step: int) -> Path:
        return self.directory / step_dir_name(step)

    # -- save ------------------------------------------------------------------------------

    def save(
        self,
        step: int,
        model,
        optimizer,
        scheduler=None,
        data_position: int = 0,
        extra: dict | None = None,
    ) -> Path:
        """Write a complete checkpoint for `step` and return its folder."""
        meta = {"step": int(step), "data_position": int(data_position), "extra": extra or {}}
        try:
            json.dumps(meta["extra"])
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"checkpoint extra must be JSON-serialisable: {err}") from None
        names = _param_names(model)
        opt_tensors, opt_values, groups = _split_optimizer(optimizer, names)

        import torch.distributed.checkpoint as dcp
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr
        from torch_xla.experimental.distributed_checkpoint import SPMDSavePlanner

        # Materialise pending lazy computations (the last step's updates) before reading. Every
        # sync advances torch_xla's RNG seed, so the seed is read right after this one: a
        # resumed run then draws exactly what the saving run draws next.
        torch_xla.sync()
        xm.wait_device_ops()
        rng = {"torch": torch.get_rng_state(), "xla": xm.get_rng_state()}
        hosts = current_hosts()
        process, processes, group = hosts.index, hosts.count, hosts.group
        final, tmp = self.path(step), self.directory / (_TMP_PREFIX + step_dir_name(step))
        if process == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._remove_leftovers()
            tmp.mkdir()
        hosts.barrier()
        try:
            state = {f"model.{k}": v for k, v in model.state_dict().items()}
            state.update({f"optim.{n}.{key}": t for (n, key), t in opt_tensors.items()})
            # thread_count > 1: with torchax installed the default single-thread writer picks
            # an overlapping loader that asks torchax for CUDA-style streams and fails.
            writer = dcp.FileSystemWriter(str(tmp), thread_count=2)
            with _quiet_single_process():
                dcp.save(state, storage_writer=writer, planner=SPMDSavePlanner(),
                         process_group=group)
            _torch_save(rng, tmp / f"rng-{process:05d}.pt")
            if self.consolidate:
                self._write_weights(model, tmp, process)
            if process == 0:
                trainer = {
                    "param_groups": groups,
                    "optimizer_values": opt_values,
                    "scheduler": scheduler.state_dict() if scheduler is not None else None,
                }
                _torch_save(trainer, tmp / _TRAINER_FILE)
                meta.update(processes=processes, devices=xr.global_runtime_device_count())
                _write_text(tmp / _META_FILE, json.dumps(meta, indent=1, sort_keys=True))
            hosts.barrier()
            if process == 0:
                write_manifest(tmp)  # last: it lists every file all processes wrote
        except Exception as error:
            cause = _os_error(error)
            if cause is None:
                raise
            if process == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointError(
                f"saving step {step} to {self.directory} failed ({cause.strerror or cause}); "
                f"its partial files are removed and the newest checkpoint is still step "
                f"{self.latest_step()}; free space and rerun to resume"
            ) from None
        if process == 0:
            self._commit(tmp, final)
            self._prune()
        hosts.barrier()
        return final

    @staticmethod
    def _write_weights(model, tmp: Path, process: int) -> None:
        # `.cpu()` on a sharded XLA tensor gathers the full tensor; it is a collective, so
        # every process runs it and process 0 writes.
        with _quiet_single_process():
            weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        if process == 0:
            from safetensors.torch import save_file

            save_file(weights, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
            os.chmod(tmp / WEIGHTS_FILE, 0o644)  # safetensors creates it owner-only
            _fsync(tmp / WEIGHTS_FILE)

    def latest_intact_step(self, main_process: bool = True) -> int | None:
        """The newest checkpoint that matches its manifest. The main process moves a damaged
        newer one aside (`step-N.damaged`) and says so in one line on stderr."""
        for step in reversed(complete_steps(self.directory)):
            problem = damage(self.path(step))
            if problem is None:
                return step
            if main_process:
                aside = self.path(step).with_name(self.path(step).name + ".damaged")
                self.path(step).rename(aside)
                print(f"checkpoint {self.path(step)} is damaged ({problem}); moved aside to "
                      f"{aside.name}", file=sys.stderr, flush=True)
        return None

    def _commit(self, tmp: Path, final: Path) -> None:
        """Make `tmp` visible as `final` with one rename (replacing a same-step checkpoint)."""
        if final.exists():
            trash = self.directory / (_TRASH_PREFIX + final.name)
            final.rename(trash)
            shutil.rmtree(trash)
        tmp.rename(final)
        _fsync(self.directory)

    def _prune(self) -> None:
        for step in complete_steps(self.directory)[: -self.keep]:
            path = self.path(step)
            trash = self.directory / (_TRASH_PREFIX + path.name)
            path.rename(trash)  # atomic: never a half-deleted folder named step-N
            shutil.rmtree(trash)

    def _remove_leftovers(self) -> None:
        for child in self.directory.iterdir():
            if child.name.startswith((_TMP_PREFIX, _TRASH_PREFIX)) and child.is_dir():
                shutil.rmtree(child)

    # -- restore ---------------------------------------------------------------------------

    def restore(self, model, optimizer, scheduler=None, step: int | None = None) -> dict:
        """Load a checkpoint (default: the latest) in place into model, optimizer, scheduler
        and the RNGs; parameters keep their sharding. Returns step, data_position, extra."""
        steps = complete_steps(self.directory)
        if not steps:
            raise CheckpointError(
                f"no complete checkpoint in {self.directory} (expected step-NNNNNNNN folders)"
            )
        step = steps[-1] if step is None else step
        if step not in steps:
            raise CheckpointError(
                f"no complete checkpoint for step {step} in {self.directory}; have {steps}"
            )
        path = self.path(step)

        import torch.distributed.checkpoint as dcp
        import torch_xla
        import torch_xla.core.xla_model as xm
        from torch_xla.experimental.distributed_checkpoint import SPMDLoadPlanner

        reader = dcp.FileSystemReader(str(path))
        saved = reader.read_metadata().state_dict_metadata
        model_state = model.state_dict(keep_vars=True)  # the live tensors: load in place
        _check_model(path, model_state, saved)
        meta = json.loads((path / _META_FILE).read_text())
        trainer = torch.load(path / _TRAINER_FILE, weights_only=True)
        names = _param_names(model)
        _check_groups(path, optimizer, names, trainer["param_groups"])
        if scheduler is not None and trainer["scheduler"] is None:
            raise CheckpointError(f"checkpoint {path} has no LR scheduler state to restore")

        opt_tensors = _optimizer_targets(optimizer, names, saved)
        torch_xla.sync()  # the zero buffers become device data the planner can load into
        xm.wait_device_ops()  # ...and the planner may only read them once that has finished
        state = {f"model.{k}": v for k, v in model_state.items()}
        state.update({f"optim.{n}.{key}": t for (n, key), t in opt_tensors.items()})
        hosts = current_hosts()
        with _quiet_single_process():
            dcp.load(state, storage_reader=reader, planner=SPMDLoadPlanner(),
                     process_group=hosts.group)
        optimizer.load_state_dict(_optimizer_state_dict(optimizer, names, opt_tensors, trainer))
        if scheduler is not None:
            scheduler.load_state_dict(trainer["scheduler"])

        rng_file = path / f"rng-{hosts.index:05d}.pt"
        if not rng_file.exists():  # fewer processes saved than restore: take process 0's
            rng_file = path / "rng-00000.pt"
        rng = torch.load(rng_file, weights_only=True)
        torch_xla.sync()
        xm.wait_device_ops()
        torch.set_rng_state(rng["torch"])
        xm.set_rng_state(rng["xla"])  # last: a sync after this would advance the seed
        return {
            "step": meta["step"],
            "data_position": meta["data_position"],
            "extra": meta["extra"],
        }


def load_checkpoint(path: str | Path) -> dict[str, torch.Tensor]:
    """Full (unsharded) weights by state_dict name, needing no torch_xla.

    `path` is a checkpoint folder (`.../step-N`), a Checkpointer directory, or a run folder
    whose checkpoints are in `checkpoints/` (the trainer's layout); the latter two give the
    newest complete checkpoint.
    """
    path = Path(path)
    if _is_checkpoint(path):
        return _read_weights(path)
    in_run = RunFolder(path).checkpoints
    for folder in (path, in_run):
        steps = complete_steps(folder)
        if steps:
            return _read_weights(folder / step_dir_name(steps[-1]))
    raise CheckpointError(
        f"{path} is neither a checkpoint folder (no {WEIGHTS_FILE} or shards) nor a folder "
        f"with complete step-NNNNNNNN checkpoints (directly or in {in_run.name}/)"
    )


def _os_error(error: BaseException) -> OSError | None:
    """The OS error (e.g. ENOSPC) behind a failed write, also when DCP wraps it."""
    for _ in range(10):
        if error is None or isinstance(error, OSError):
            return error
        failures = getattr(error, "failures", None)  # DCP's CheckpointException: rank -> error
        if isinstance(failures, dict) and failures:
            error = next(iter(failures.values()))
            continue
        error = error.__cause__ or error.__context__
    return None


def _is_checkpoint(folder: Path) -> bool:
    return (folder / WEIGHTS_FILE).is_file() or (folder / ".metadata").is_file()


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The consolidated file when there is one; otherwise the `model.` entries of the DCP
    shards, assembled into full tensors on the host (optimizer state is not read)."""
    problem = damage(folder)
    if problem is not None:
        raise CheckpointError(f"checkpoint {folder} is damaged: {problem}; use an older "
                              "checkpoint of the run (checkpoints/step-N)")
    if (folder / WEIGHTS_FILE).is_file():
        from safetensors.torch import load_file

        return load_file(str(folder / WEIGHTS_FILE))
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(str(folder))
    state = {
        name: torch.empty(meta.size, dtype=meta.properties.dtype)
        for name, meta in reader.read_metadata().state_dict_metadata.items()
        if name.startswith("model.") and isinstance(meta, TensorStorageMetadata)
    }
    with _quiet_single_process():
        dcp.load(state, storage_reader=reader, no_dist=True)
    return {name.removeprefix("model."): tensor for name, tensor in state.items()}


# -- helpers -------------------------------------------------------------------------------


def _param_names(model) -> dict[int, str]:
    return {id(p): name for name, p in model.named_parameters()}


def _split_optimizer(optimizer, names: dict[int, str]):
    """Optimizer state keyed by parameter name: tensors (for DCP), other values, and the
    param groups with parameter names in place of the parameters."""
    tensors, values, groups = {}, {}, []
    for group in optimizer.param_groups:
        group_names = []
        for param in group["params"]:
            if id(param) not in names:
                raise CheckpointError(
                    "the optimizer holds a parameter that is not in the model; build the "
                    "optimizer from model.parameters()"
                )
            name = names[id(param)]
            group_names.append(name)
            for key, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor):
                    tensors[name, key] = value
                else:
                    values.setdefault(name, {})[key] = value
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": group_names})
    return tensors, values, groups


def _check_model(path: Path, model_state: dict, saved: dict) -> None:
    """One-line error naming the first parameter/buffer that does not fit."""
    saved_shapes = {
        k[len("model.") :]: list(md.size)
        for k, md in saved.items()
        if k.startswith("model.") and hasattr(md, "size")
    }
    for name, tensor in model_state.items():
        if name not in saved_shapes:
            raise CheckpointError(
                f"checkpoint {path} does not fit the model: '{name}' is in the model but not "
                "in the checkpoint"
            )
        if saved_shapes[name] != list(tensor.shape):
            raise CheckpointError(
                f"checkpoint {path} does not fit the model: '{name}' has shape "
                f"{saved_shapes[name]} in the checkpoint but {list(tensor.shape)} in the model"
            )
    extra = [name for name in saved_shapes if name not in model_state]
    if extra:
        raise CheckpointError(
            f"checkpoint {path} does not fit the model: '{extra[0]}' is in the checkpoint but "
            "not in the model"
        )


def _check_groups(path: Path, optimizer, names: dict[int, str], saved_groups: list) -> None:
    if len(saved_groups) != len(optimizer.param_groups):
        raise CheckpointError(
            f"checkpoint {path} has {len(saved_groups)} optimizer param groups but the "
            f"optimizer has {len(optimizer.param_groups)}"
        )
    for index, (group, saved) in enumerate(zip(optimizer.param_groups, saved_groups)):
        current = [names.get(id(p), "?") for p in group["params"]]
        for position, (ours, theirs) in enumerate(zip_longest(current, saved["params"])):
            if ours != theirs:
                raise CheckpointError(
                    f"checkpoint {path}: optimizer param group {index} has '{ours}' at "
                    f"position {position} but the checkpoint has '{theirs}'"
                )


def _optimizer_targets(optimizer, names: dict[int, str], saved: dict) -> dict:
    """Zero tensors to load the saved optimizer state into, one per saved tensor.

    State shaped like its parameter (exp_avg, exp_avg_sq, ...) lives on the parameter's device
    with the parameter's sharding, which is what a training step would have created; anything
    else (AdamW's scalar `step`) is a CPU tensor, as torch keeps it.
    """
    import torch_xla

    by_param: dict[str, dict] = {}
    for fqn, md in saved.items():
        if fqn.startswith("optim.") and hasattr(md, "size"):
            name, _, key = fqn[len("optim.") :].rpartition(".")
            by_param.setdefault(name, {})[key] = md
    targets = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            name = names[id(param)]
            for key, md in by_param.get(name, {}).items():
                if len(md.size) and tuple(md.size) == tuple(param.shape):
                    zeros = torch.zeros(md.size, dtype=md.properties.dtype, device=param.device)
                    if param.device.type == "xla":
                        sharding = torch_xla._XLAC._get_xla_op_sharding(param)
                        if sharding is not None:
                            torch_xla._XLAC._xla_mark_sharding(zeros, sharding)
                else:
                    zeros = torch.zeros(md.size, dtype=md.properties.dtype)
                targets[name, key] = zeros
    return targets


def _optimizer_state_dict(optimizer, names: dict[int, str], tensors: dict, trainer: dict):
    """The loaded state in `optimizer.state_dict()` form (integer ids in group order)."""
    state, groups, index = {}, [], 0
    for group, saved in zip(optimizer.param_groups, trainer["param_groups"]):
        ids = []
        for param in group["params"]:
            name = names[id(param)]
            entry = {key: t for (n, key), t in tensors.items() if n == name}
            entry.update(trainer["optimizer_values"].get(name, {}))
            if entry:
                state[index] = entry
            ids.append(index)
            index += 1
        groups.append({**saved, "params": ids})
    return {"state": state, "param_groups": groups}


@contextlib.contextmanager
def _quiet_single_process():
    """Silence warnings about torch/torch_xla internals that users cannot act on: DCP without
    a process group (our single-process case), its planner signature, storage deprecations."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        warnings.filterwarnings(
            "ignore", category=UserWarning, module=r"torch(_xla)?\.(distributed|storage)"
        )
        warnings.filterwarnings("ignore", message=".*TypedStorage is deprecated")
        yield


def _torch_save(obj, path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _write_text(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _fsync(path: Path) -> None:
    """Flush a file or a directory entry (a rename) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
