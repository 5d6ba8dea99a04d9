"""The layout of a run folder, spelled in one place:

    RUN/config.yaml                 the resolved run config
    RUN/metrics.jsonl               one record per logged step
    RUN/checkpoints/step-NNNNNNNN/  resumable checkpoints (core/store/checkpoint.py)
    RUN/hf/step-NNNNNNNN/           Hugging Face exports of those checkpoints
    RUN/.lock                       host and pid of the run writing here, while it runs
    RUN/run-id                      the run's identity; it owns its checkpoint location
    RUN/wandb-run-id                the run's W&B id: restarts and evals continue that run
    RUN/tb/                         TensorBoard scalars of the logged metrics
    RUN/profile/                    an XLA profile of a step window, when one was asked for
    RUN/eval_results.json           the latest `zoo eval` of the run

RUN may be a bucket URL; it is then written in a local copy (core/store/run_home.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import socket
import sys
import uuid
from pathlib import Path

from core.errors import UserError

_STEP_DIR = re.compile(r"step-(\d+)")
# a checkpoint location outside the run folder (checkpoint_dir) keeps the run's config here
LOCATION_CONFIG = "run-config.yaml"
# the run folder's file names, for code that reads them where the run lives (core/store/run_home.py)
RUN_CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
RUN_ID = "run-id"
WANDB_ID = "wandb-run-id"
LOCK = ".lock"
CHECKPOINTS = "checkpoints"


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def step_of(folder_name: str) -> int | None:
    """The step a `step-N` folder name stands for; None for any other name."""
    found = _STEP_DIR.fullmatch(folder_name)
    return int(found.group(1)) if found else None


@dataclasses.dataclass(frozen=True)
class RunFolder:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / RUN_CONFIG

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    @property
    def wandb_id(self) -> Path:
        return self.path / WANDB_ID

    @property
    def tensorboard(self) -> Path:
        return self.path / "tb"

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    def export(self, step: int) -> Path:
        return self.path / "hf" / step_dir_name(step)

    @property
    def lock_file(self) -> Path:
        return self.path / LOCK

    @property
    def run_id_file(self) -> Path:
        return self.path / RUN_ID

    def run_id(self) -> str | None:
        """The run's identity, None before its first training step (a fresh folder)."""
        try:
            return self.run_id_file.read_text().strip()
        except FileNotFoundError:
            return None

    def ensure_run_id(self) -> str:
        """The run's identity, made when the run first trains; a copy of the folder keeps it."""
        if found := self.run_id():
            return found
        self.run_id_file.write_text(uuid.uuid4().hex + "\n")
        return self.run_id()

    @contextlib.contextmanager
    def locked(self):
        """Hold the folder for one writer: a second run here fails at once, naming the host
        and pid that hold it; a lock left by a process that died on this host is taken over
        with a warning."""
        self.path.mkdir(parents=True, exist_ok=True)
        mine = {"host": socket.gethostname(), "pid": os.getpid()}
        while not _create(self.lock_file, mine):
            holder = _read_lock(self.lock_file)
            if holder is None:
                continue  # released meanwhile
            if holder.get("host") not in (None, mine["host"]) or alive(holder.get("pid")):
                raise UserError(
                    f"{self.path} is in use by pid {holder.get('pid')} on host "
                    f"{holder.get('host')}; wait for that run or use another --out (if that "
                    f"process is gone, remove {self.lock_file})"
                )
            print(f"warning: taking over {self.lock_file} from pid {holder.get('pid')}, "
                  "which is no longer running", file=sys.stderr)
            self.lock_file.unlink(missing_ok=True)
        try:
            yield
        finally:
            if _read_lock(self.lock_file) == mine:
                self.lock_file.unlink(missing_ok=True)


def _create(path: Path, holder: dict) -> bool:
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w") as file:
        json.dump(holder, file)
    return True


def _read_lock(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:  # a writer killed between create and write
        return {}


def alive(pid) -> bool:
    """Whether process `pid` of this host runs (False for anything but an int)."""
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True
