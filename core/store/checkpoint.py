"""Resumable sharded checkpoints for SPMD training, on any storage (core/store/location.py: a local
folder, gs://, ...), written in the background while training goes on.

Each checkpoint is one folder under the checkpoint location:

    DIR/step-00000040/
        .metadata, __*_*.distcp   torch.distributed.checkpoint (DCP) shards, written by every
                                  process with its backend's planner (core/backends: torch_xla's
                                  SPMD planners, or DCP's own for DTensors): `model.<name>` for
                                  model.state_dict() (less frozen weights: a LoRA run's
                                  base), `optim.<param name>.<key>` for each optimizer
                                  state tensor (exp_avg, exp_avg_sq, step, ...)
        trainer.pt                optimizer param groups (by parameter name), LR scheduler
        rng-00000.pt              per process: torch CPU and the device's RNG states
        model.safetensors         only with consolidate=True: the same model entries,
                                  unsharded, by state_dict (Hugging Face) name
        meta.json                 step, data position, `extra`, process/device counts
        manifest.json             every file's size and checksum; written last, it commits
    DIR/step-00000060.damaged/    a checkpoint that failed its manifest, moved aside, kept

No folder is ever renamed into place (buckets cannot): a checkpoint exists once its
`manifest.json` does (core/store/manifest.py), and a folder without one is a crashed save
that the next save removes. Pruning and replacing remove the manifest first, then the files.

Where the hosts of a slice write: when the location is shared (a bucket, a shared disk) all
hosts write one checkpoint together and host 0 commits it after a barrier. When each host sees
only its own folder (a host's local disk), each host writes and commits what it holds there,
and a resume takes the newest step every host has committed; such checkpoints restore only on
the same slice shape. Which case holds is found by a probe file host 0 writes.

`async_save=True` copies the state to host memory (the only part that stalls training) and
writes it on a background thread over a gloo group of its own; the next save, `wait()`, and
the end of training wait for it. A save that fails for lack of space (or any OS error) removes
its partial folder and says so in one line (at the next `wait()` when it ran in background).

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

import concurrent.futures
import contextlib
import copy
import io
import json
import os
import sys
import uuid
import warnings
from itertools import zip_longest

import safetensors.torch
import torch

from core import backends
from core.backends import zeros_like_param
from core.errors import UserError
from core.hosts import Hosts
from core.hosts import current as current_hosts
from core.remat import unstack_weights
from core.store.location import Store, answered, reason
from core.store.manifest import MANIFEST, damage, is_committed, write_manifest
from core.store.run_folder import step_dir_name, step_of

WEIGHTS_FILE = "model.safetensors"
_META_FILE = "meta.json"
_TRAINER_FILE = "trainer.pt"
# the `extra` entry that records the frozen weights a checkpoint leaves out (core/lora.py)
BASE_FINGERPRINT = "base_fingerprint"


class CheckpointError(UserError):
    """A checkpoint that is missing or does not fit the model/optimizer being restored."""


def complete_steps(location) -> list[int]:
    """Steps of the committed checkpoints at `location` (a path, URL or Store), ascending."""
    store = location if isinstance(location, Store) else Store(location)
    steps = [(step_of(name), name) for name in store.children()]
    return sorted(step for step, name in steps
                  if step is not None and is_committed(store / name))


class Checkpointer:
    """Periodic sharded saves at `location`, keeping the newest `keep` committed ones.

    Every host calls `save`/`restore` at the same step (SPMD programs are global); hosts
    coordinate over `core.hosts` (a gloo group on a slice). `save` installs no signal
    handlers: call it from the training loop, e.g. once the hosts have agreed to stop.
    """

    def __init__(self, location, keep: int = 3, consolidate: bool = False,
                 async_save: bool = False, backend=None):
        if keep < 1:
            raise CheckpointError(f"checkpoint keep must be at least 1, got {keep}")
        self.store = Store(location)
        self.keep = keep
        self.consolidate = consolidate
        self.async_save = async_save
        self._backend = backend  # core/backends: how tensors are read and placed
        self._shared: bool | None = None  # every host sees one folder (found on first use)
        self._writer: Hosts | None = None  # the background writer's own group of the hosts
        self._background = concurrent.futures.ThreadPoolExecutor(1) if async_save else None
        self._pending: concurrent.futures.Future | None = None

    @property
    def backend(self):
        if self._backend is None:
            self._backend = backends.get("xla")
        return self._backend

    @property
    def directory(self) -> str:
        return self.store.url

    def latest_step(self) -> int | None:
        steps = complete_steps(self.store)
        return steps[-1] if steps else None

    def path(self, step: int) -> Store:
        return self.store / step_dir_name(step)

    # -- save ------------------------------------------------------------------------------

    def save(
        self,
        step: int,
        model,
        optimizer,
        scheduler=None,
        data_position: int = 0,
        extra: dict | None = None,
    ) -> Store:
        """Write a checkpoint for `step` (in background with async_save); its folder."""
        self.wait()
        meta = {"step": int(step), "data_position": int(data_position), "extra": extra or {}}
        try:
            json.dumps(meta["extra"])
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"checkpoint extra must be JSON-serialisable: {err}") from None
        names = _param_names(model)
        opt_tensors, opt_values, groups = _split_optimizer(optimizer, names)

        # pending computations (the last step's updates) first; the RNG right after them
        self.backend.materialize()
        rng = self.backend.rng_state()
        hosts = current_hosts()
        shared = self._is_shared(hosts)
        if self._writer is None:  # every host reaches its first save together
            self._writer = hosts.new_group() if self.async_save else hosts
        state = {f"model.{k}": v for k, v in trained_state(model).items()}
        state.update({f"optim.{n}.{key}": t for (n, key), t in opt_tensors.items()})
        meta.update(processes=hosts.count, devices=self.backend.device_count())
        job = _Save(
            folder=self.path(step), hosts=self._writer, shared=shared,
            state=self.backend.host_copy(state), planner=self.backend.save_planner(), rng=rng,
            trainer=copy.deepcopy({
                "param_groups": groups,
                "optimizer_values": opt_values,
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
            }),
            meta=meta,
            weights=_full_weights(model) if self.consolidate else None,
        )
        if job.writes_alone:
            self._clear_for(step)
        hosts.barrier()
        if self._background is None:
            self._run(job)
        else:
            self._pending = self._background.submit(self._run, job)
        return job.folder

    def wait(self) -> None:
        """Until the save in background (if any) is committed; raises its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _run(self, job: _Save) -> None:
        try:
            job.write()
        except Exception as error:
            cause = _os_error(error)
            if cause is None:
                raise
            if job.writes_alone:
                job.folder.remove()
            raise CheckpointError(
                f"saving step {job.meta['step']} to {self.store} failed "
                f"({cause.strerror or cause}); its partial files are removed and the newest "
                f"checkpoint is still step {self.latest_step()}; free space and rerun to resume"
            ) from None
        if job.writes_alone:
            self._prune()
        job.hosts.barrier()

    def _is_shared(self, hosts: Hosts) -> bool:
        """Whether every host sees the same folder here, found once with a probe file."""
        if self._shared is None:
            self._shared = self._probe(hosts)
        return self._shared

    def _probe(self, hosts: Hosts) -> bool:
        """Host 0 writes a file; the hosts that see it share the location."""
        if hosts.count == 1:
            return True
        probe = f".host-probe-{hosts.gather(uuid.uuid4().hex)[0]}"
        if hosts.main:
            self.store.write_text(probe, "written by host 0 to see which hosts share this\n")
        hosts.barrier()
        seen = hosts.gather(self.store.exists(probe))
        hosts.barrier()
        if hosts.main:
            self.store.remove(probe)
        if all(seen) or not any(seen[1:]):
            return all(seen)
        sharing = [index for index, yes in enumerate(seen) if yes]
        raise CheckpointError(
            f"{self.store} is shared by hosts {sharing} but not by the others; put checkpoints "
            "where every host sees them (a gs:// bucket) or on every host's own disk"
        )

    def _clear_for(self, step: int) -> None:
        """Remove crashed saves, and a committed `step` that is about to be replaced."""
        for name in self.store.children():
            found = step_of(name)
            if found is not None and (found == step or not is_committed(self.store / name)):
                _remove_checkpoint(self.store / name)

    def _prune(self) -> None:
        for step in complete_steps(self.store)[: -self.keep]:
            _remove_checkpoint(self.path(step))

    # -- resume ----------------------------------------------------------------------------

    def resume_step(self) -> int | None:
        """The step every host resumes from: the newest intact checkpoint (on a shared
        location, as host 0 finds it; on local disks, the newest every host has)."""
        hosts = current_hosts()
        if self._is_shared(hosts):
            return hosts.gather(self.latest_intact_step() if hosts.main else None)[0]
        everywhere = set.intersection(*map(set, hosts.gather(self._intact_steps())))
        return max(everywhere, default=None)

    def latest_intact_step(self) -> int | None:
        """The newest checkpoint that matches its manifest; a damaged newer one is moved
        aside (`step-N.damaged`) with one line on stderr."""
        intact = self._intact_steps(newest_only=True)
        return intact[-1] if intact else None

    def _intact_steps(self, newest_only: bool = False) -> list[int]:
        intact = []
        for step in reversed(complete_steps(self.store)):
            folder = self.path(step)
            problem = damage(folder)
            if problem is not None:
                aside = folder.move(folder.name + ".damaged")
                _say(f"checkpoint {folder} is damaged ({problem}); moved aside to {aside.name}")
                continue
            intact.insert(0, step)
            if newest_only:
                break
        return intact

    def restore(self, model, optimizer, scheduler=None, step: int | None = None) -> dict:
        """Load a checkpoint (default: the latest) in place into model, optimizer, scheduler
        and the RNGs; parameters keep their sharding. Returns step, data_position, extra."""
        steps = complete_steps(self.store)
        if not steps:
            raise CheckpointError(
                f"no complete checkpoint in {self.store} (expected step-NNNNNNNN folders)"
            )
        step = steps[-1] if step is None else step
        if step not in steps:
            raise CheckpointError(
                f"no complete checkpoint for step {step} in {self.store}; have {steps}"
            )
        folder = self.path(step)

        import torch.distributed.checkpoint as dcp  # start-up
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader  # start-up

        hosts = current_hosts()
        meta = json.loads(folder.read_text(_META_FILE))
        shared = self._is_shared(hosts)
        if not shared and meta.get("processes") != hosts.count:
            raise CheckpointError(
                f"checkpoint {folder} was saved on each host's own disk by {meta['processes']} "
                f"hosts; it restores only on {meta['processes']} hosts (keep checkpoints in a "
                "gs:// bucket to change the slice)"
            )
        reader = FsspecReader(folder.url)
        saved = reader.read_metadata().state_dict_metadata
        model_state = trained_state(model, keep_vars=True)  # the live tensors: load in place
        _check_model(folder, model_state, saved)
        trainer = _torch_load(folder, _TRAINER_FILE)
        names = _param_names(model)
        _check_groups(folder, optimizer, names, trainer["param_groups"])
        if scheduler is not None and trainer["scheduler"] is None:
            raise CheckpointError(f"checkpoint {folder} has no LR scheduler state to restore")

        opt_tensors = _optimizer_targets(optimizer, names, saved)
        self.backend.materialize()  # the zero buffers are device data the planner loads into
        state = {f"model.{k}": v for k, v in model_state.items()}
        state.update({f"optim.{n}.{key}": t for (n, key), t in opt_tensors.items()})
        with _quiet_single_process():
            dcp.load(state, storage_reader=reader, planner=self.backend.load_planner(),
                     process_group=hosts.group, no_dist=not shared or hosts.group is None)
        optimizer.load_state_dict(_optimizer_state_dict(optimizer, names, opt_tensors, trainer))
        if scheduler is not None:
            scheduler.load_state_dict(trainer["scheduler"])

        rng_file = f"rng-{hosts.index:05d}.pt"
        if not folder.exists(rng_file):  # fewer processes saved than restore: take process 0's
            rng_file = "rng-00000.pt"
        self.backend.set_rng_state(_torch_load(folder, rng_file))
        return {
            "step": meta["step"],
            "data_position": meta["data_position"],
            "extra": meta["extra"],
        }


class _Save:
    """One checkpoint's writes, from host memory: the part that may run in background."""

    def __init__(self, folder: Store, hosts: Hosts, shared: bool, state: dict, planner,
                 rng: dict, trainer: dict, meta: dict, weights: dict | None):
        self.folder, self.hosts, self.shared, self.planner = folder, hosts, shared, planner
        self.state, self.rng, self.trainer, self.meta, self.weights = (
            state, rng, trainer, meta, weights)
        # what there is one of per checkpoint (trainer state, meta, weights, the commit)
        self.writes_alone = hosts.main or not shared

    def write(self) -> None:
        import torch.distributed.checkpoint as dcp  # start-up
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter  # start-up

        self.folder.makedirs()
        # thread_count > 1: with torchax installed the default single-thread writer picks
        # an overlapping loader that asks torchax for CUDA-style streams and fails.
        writer = FsspecWriter(self.folder.url, thread_count=2)
        with _quiet_single_process():
            dcp.save(self.state, storage_writer=writer, planner=self.planner,
                     process_group=self.hosts.group,
                     no_dist=not self.shared or self.hosts.group is None)
        self.folder.write_bytes(f"rng-{self.hosts.index:05d}.pt", _torch_bytes(self.rng))
        if self.writes_alone:
            if self.weights is not None:
                self.folder.write_bytes(WEIGHTS_FILE,
                                        safetensors.torch.save(self.weights, {"format": "pt"}))
            self.folder.write_bytes(_TRAINER_FILE, _torch_bytes(self.trainer))
            self.folder.write_text(_META_FILE, json.dumps(self.meta, indent=1, sort_keys=True))
        self.hosts.barrier()  # every host's files are written...
        if self.writes_alone:
            write_manifest(self.folder)  # ...before the commit lists them


def _full_weights(model) -> dict[str, torch.Tensor]:
    # `.cpu()` on a sharded XLA tensor gathers the full tensor; it is a collective, so every
    # process runs it, in the training thread.
    from torch.distributed.tensor import DTensor  # start-up

    def whole(value):
        return value.full_tensor() if isinstance(value, DTensor) else value

    with _quiet_single_process():
        return {k: whole(v.detach()).cpu().contiguous() for k, v in trained_state(model).items()}


def check_writable(location) -> None:
    """Fail in one line, before anything is built, when checkpoints cannot be written at
    `location` (no bucket, no credentials, no network, a read-only disk, a file in the way),
    within PROBE_TIMEOUT_S for a bucket that does not answer."""

    def probe() -> None:  # opening a bucket's filesystem looks for credentials: in here too
        store = Store(location)
        made = _missing_folders(store)
        name = f".write-probe-{uuid.uuid4().hex}"
        try:
            store.write_text(name, "zoo checks it can write checkpoints here\n")
        finally:  # leave nothing behind, and remove only what this probe made
            store.remove(name)
            for folder in made:  # innermost first; one another start also uses stays
                with contextlib.suppress(OSError):
                    os.rmdir(folder)

    try:
        answered(probe)
    except Exception as error:
        raise CheckpointError(f"cannot write checkpoints to {location}: "
                              f"{reason(error)}") from None


def _missing_folders(store: Store) -> list[str]:
    """The local folders that writing into `store` creates, innermost first (none for a
    bucket, which has no folders to leave behind)."""
    if "file" not in store.fs.protocol or store.exists():
        return []
    missing = []
    while store.parent.root != store.root and not store.exists():
        missing.append(store.path())
        store = store.parent
    return missing


def _remove_checkpoint(folder: Store) -> None:
    folder.remove(MANIFEST)  # uncommitted first: never a half-deleted checkpoint that counts
    folder.remove()


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
    return json.loads(Store(folder).read_text(_META_FILE))["extra"]


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


def _is_checkpoint(folder: Store) -> bool:
    return folder.exists(WEIGHTS_FILE) or folder.exists(".metadata")


def _read_weights(folder: Store) -> dict[str, torch.Tensor]:
    """The consolidated file when there is one; otherwise the `model.` entries of the DCP
    shards, assembled into full tensors on the host (optimizer state is not read)."""
    problem = damage(folder)
    if problem is not None:
        raise CheckpointError(f"checkpoint {folder} is damaged: {problem}; use an older "
                              "checkpoint of the run (checkpoints/step-N)")
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
    with _quiet_single_process():
        dcp.load(state, storage_reader=reader, no_dist=True)
    return {name.removeprefix("model."): tensor for name, tensor in state.items()}


# -- helpers -------------------------------------------------------------------------------


def trained_state(model, keep_vars: bool = False) -> dict[str, torch.Tensor]:
    """What a checkpoint holds of the model: its state but the frozen parameters (a LoRA
    run's base, which the run loads again from where it started and knows by the
    fingerprint it saves, core/lora.py)."""
    frozen = {name for name, param in model.named_parameters(remove_duplicate=False)
              if not param.requires_grad}
    return {k: v for k, v in model.state_dict(keep_vars=keep_vars).items() if k not in frozen}


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


def _check_model(path: Store, model_state: dict, saved: dict) -> None:
    """One-line error naming the first parameter/buffer that does not fit."""
    saved_shapes = {k[len("model.") :]: list(md.size) for k, md in saved.items()
                    if k.startswith("model.") and hasattr(md, "size")}
    misfit = first_misfit({k: list(t.shape) for k, t in model_state.items()}, saved_shapes)
    if misfit:
        raise CheckpointError(f"checkpoint {path} does not fit the model: {misfit}")


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


def _check_groups(path: Store, optimizer, names: dict[int, str], saved_groups: list) -> None:
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
                    zeros = zeros_like_param(param, md.properties.dtype)
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


def _torch_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _torch_load(folder: Store, name: str):
    return torch.load(io.BytesIO(folder.read_bytes(name)), weights_only=True)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
