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
    RUN/goodput.json                where each attempt's wall time went (core/goodput.py)

RUN may be a bucket URL; it is then written in a local copy (core/store/run_home.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import socket
import sys
import uuid
from pathlib import Path

from core.errors import UserError
from core.json_file import DamagedFile, json_object

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
GOODPUT = "goodput.json"


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
        with a warning. A disk that refuses the lock (read-only, full) is one line, and a
        folder made here for it is removed again."""
        made = not self.path.exists()
        mine = {"host": socket.gethostname(), "pid": os.getpid()}
        try:
            self._take_lock(mine)
        except OSError as error:
            if made:
                with contextlib.suppress(OSError):
                    self.path.rmdir()  # only if empty: nothing of another start's is lost
            fix = "free space there or " if error.errno == errno.ENOSPC else ""
            raise UserError(f"cannot write the run folder {self.path}: {error.strerror}; "
                            f"{fix}use another --out") from None
        try:
            yield
        finally:
            if _read_lock(self.lock_file) == mine:
                self.lock_file.unlink(missing_ok=True)

    def _take_lock(self, mine: dict) -> None:
        while not _create(self.lock_file, mine):
            holder = _read_lock(self.lock_file)
            if holder is None:
                continue  # released meanwhile
            if holder.get("host") not in (None, mine["host"]) or alive(holder.get("pid")):
                raise UserError(
                    f"{self.path} is in use by pid {holder.get('pid')} on host "
                    f"{holder.get('host')} (lock {self.lock_file}); wait for that run or use "
                    f"another --out (if that process is gone, remove {self.lock_file})"
                )
            what = ("is damaged" if not holder else
                    f"was left by pid {holder.get('pid')}, which is no longer running")
            print(f"warning: taking over {self.lock_file}, which {what}", file=sys.stderr)
            self.lock_file.unlink(missing_ok=True)


def _create(path: Path, holder: dict) -> bool:
    """Create `path` holding `holder` unless it exists, atomically: written in a draft
    beside it and hard-linked into place, so a second start never reads an empty lock. Its
    folder is made again if it vanishes meanwhile (another start's write probe removing the
    empty folder it made)."""
    draft = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tries = 3
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            draft.write_text(json.dumps(holder))
            os.link(draft, path)
            return True
        except FileExistsError:
            return False
        except FileNotFoundError:
            tries -= 1
            if not tries:
                raise
        finally:
            draft.unlink(missing_ok=True)


def _read_lock(path: Path) -> dict | None:
    """The lock's holder; {} for a damaged lock (not a JSON object: edited or cut by a
    full disk), None when there is none."""
    try:
        return json_object(path.read_text(), str(path), "")
    except FileNotFoundError:
        return None
    except DamagedFile:
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
