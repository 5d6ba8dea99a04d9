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

Optimizer state is keyed by parameter name (core/store/optimizer_state.py) and restored
without a training step. Frozen parameters (a LoRA run's base) are left out of the
checkpoint: the run loads them again from where it started, and the checkpoint records
their fingerprint (core/store/frozen_base.py), which a restore checks.

A checkpoint is read offline, on the host and without torch_xla, by
core/store/checkpoint_reader.py (evaluation, export). Consolidating at save time is off by
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
import weakref

import safetensors.torch
import torch

from core import backends
from core.hosts import Hosts
from core.hosts import current as current_hosts
from core.store import frozen_base
from core.store.checkpoint_reader import (
    META_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    complete_steps,
    first_misfit,
    quiet_single_process,
)
from core.store.location import Store, answered, reason
from core.store.manifest import MANIFEST, damage, is_committed, write_manifest
from core.store.optimizer_state import (
    check_groups,
    optimizer_state_dict,
    optimizer_targets,
    param_names,
    split_optimizer,
)
from core.store.run_folder import step_dir_name, step_of

_TRAINER_FILE = "trainer.pt"


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
        # model -> its frozen weights' fingerprint: made once, as they never change
        self._fingerprints: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

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
        """Write a checkpoint for `step` (in background with async_save); its folder. `extra`
        gains the fingerprint of the model's frozen weights, when some are."""
        self.wait()
        base = self._base_fingerprint(model)  # what the checkpoint leaves out, known again
        extra = {**(extra or {}), frozen_base.BASE_FINGERPRINT: base} if base else extra or {}
        meta = {"step": int(step), "data_position": int(data_position), "extra": extra}
        try:
            json.dumps(meta["extra"])
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"checkpoint extra must be JSON-serialisable: {err}") from None
        names = param_names(model)
        opt_tensors, opt_values, groups = split_optimizer(optimizer, names)

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

    def _base_fingerprint(self, model) -> dict[str, float]:
        """The fingerprint of `model`'s frozen weights (none when all train), which a
        checkpoint records because it does not hold them."""
        if model not in self._fingerprints:
            self._fingerprints[model] = frozen_base.fingerprint(model)
        return self._fingerprints[model]

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
        and the RNGs; parameters keep their sharding. Returns step, data_position, extra.
        Refused when `model`'s frozen weights are not those the checkpoint was saved over."""
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
        meta = json.loads(folder.read_text(META_FILE))
        shared = self._is_shared(hosts)
        if not shared and meta.get("processes") != hosts.count:
            raise CheckpointError(
                f"checkpoint {folder} was saved on each host's own disk by {meta['processes']} "
                f"hosts; it restores only on {meta['processes']} hosts (keep checkpoints in a "
                "gs:// bucket to change the slice)"
            )
        if not frozen_base.same_fingerprint(
                meta["extra"].get(frozen_base.BASE_FINGERPRINT, {}), self._base_fingerprint(model)):
            raise CheckpointError(
                f"the checkpoint at step {step} trained adapters on other frozen weights than "
                f"this run starts from (was its --init-from folder changed?); restore that "
                f"base, or train in a new --out")
        reader = FsspecReader(folder.url)
        saved = reader.read_metadata().state_dict_metadata
        model_state = trained_state(model, keep_vars=True)  # the live tensors: load in place
        _check_model(folder, model_state, saved)
        trainer = _torch_load(folder, _TRAINER_FILE)
        names = param_names(model)
        check_groups(folder, optimizer, names, trainer["param_groups"])
        if scheduler is not None and trainer["scheduler"] is None:
            raise CheckpointError(f"checkpoint {folder} has no LR scheduler state to restore")

        opt_tensors = optimizer_targets(optimizer, names, saved)
        self.backend.materialize()  # the zero buffers are device data the planner loads into
        state = {f"model.{k}": v for k, v in model_state.items()}
        state.update({f"optim.{n}.{key}": t for (n, key), t in opt_tensors.items()})
        with quiet_single_process():
            dcp.load(state, storage_reader=reader, planner=self.backend.load_planner(),
                     process_group=hosts.group, no_dist=not shared or hosts.group is None)
        optimizer.load_state_dict(optimizer_state_dict(optimizer, names, opt_tensors, trainer))
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
        with quiet_single_process():
            dcp.save(self.state, storage_writer=writer, planner=self.planner,
                     process_group=self.hosts.group,
                     no_dist=not self.shared or self.hosts.group is None)
        self.folder.write_bytes(f"rng-{self.hosts.index:05d}.pt", _torch_bytes(self.rng))
        if self.writes_alone:
            if self.weights is not None:
                self.folder.write_bytes(WEIGHTS_FILE,
                                        safetensors.torch.save(self.weights, {"format": "pt"}))
            self.folder.write_bytes(_TRAINER_FILE, _torch_bytes(self.trainer))
            self.folder.write_text(META_FILE, json.dumps(self.meta, indent=1, sort_keys=True))
        self.hosts.barrier()  # every host's files are written...
        if self.writes_alone:
            write_manifest(self.folder)  # ...before the commit lists them


def _full_weights(model) -> dict[str, torch.Tensor]:
    # `.cpu()` on a sharded XLA tensor gathers the full tensor; it is a collective, so every
    # process runs it, in the training thread.
    from torch.distributed.tensor import DTensor  # start-up

    def whole(value):
        return value.full_tensor() if isinstance(value, DTensor) else value

    with quiet_single_process():
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


# -- helpers -------------------------------------------------------------------------------


def trained_state(model, keep_vars: bool = False) -> dict[str, torch.Tensor]:
    """What a checkpoint holds of the model: its state but the frozen parameters (a LoRA
    run's base, which the run loads again from where it started and knows by the
    fingerprint it saves, core/store/frozen_base.py)."""
    frozen = {name for name, param in model.named_parameters(remove_duplicate=False)
              if not param.requires_grad}
    return {k: v for k, v in model.state_dict(keep_vars=keep_vars).items() if k not in frozen}


def _check_model(path: Store, model_state: dict, saved: dict) -> None:
    """One-line error naming the first parameter/buffer that does not fit."""
    saved_shapes = {k[len("model.") :]: list(md.size) for k, md in saved.items()
                    if k.startswith("model.") and hasattr(md, "size")}
    misfit = first_misfit({k: list(t.shape) for k, t in model_state.items()}, saved_shapes)
    if misfit:
        raise CheckpointError(f"checkpoint {path} does not fit the model: {misfit}")


def _torch_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _torch_load(folder: Store, name: str):
    return torch.load(io.BytesIO(folder.read_bytes(name)), weights_only=True)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
