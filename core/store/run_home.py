"""Where a run folder lives: a local path, worked in place, or a URL (`gs://bucket/runs/x`;
`file://` in tests), worked in a local copy and pushed back to it.

On a preemptible slice the VM and its disk are recreated at every preemption, so a run whose
`--out` is a bucket keeps everything there: config, metrics, TensorBoard events, the W&B run
id, checkpoints (`out/checkpoints`), exports and eval results. The files that writers append
to or rewrite (metrics.jsonl, event files, W&B's own) are written locally, where appending
works, and uploaded whole, as object stores want them:

- at a run's start the local copy is made anew from the files a run continues (`CONTINUED`);
  everything else it writes is new;
- at every checkpoint and at exit, everything changed is pushed; between checkpoints, at
  most every `PUSH_EVERY_S` when metrics are logged (records after the last checkpoint are
  dropped on resume anyway, so nothing a resumed run keeps is ever missing).

The local copy is CACHE/runs/KEY (CACHE: $ZOO_CACHE, else ~/.cache/zoo; KEY: the URL's hash
and last name); only the run's main host writes it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

from core.cache import cache_home
from core.store.location import Store
from core.store.run_folder import GOODPUT, LOCK, METRICS, RUN_CONFIG, RUN_ID, WANDB_ID

# what a resumed run reads back: its config, its metrics so far, its identities, the account
# of its earlier attempts
CONTINUED = (RUN_CONFIG, METRICS, RUN_ID, WANDB_ID, GOODPUT)
PUSH_EVERY_S = 30.0
_NEVER_PUSHED = (LOCK,)  # this VM's lock: the checkpoint location's lease guards the bucket


class RunHome:
    def __init__(self, out: str | os.PathLike):
        self.out = os.fspath(out)  # as the user gave it: a path or a URL
        self.in_bucket = "://" in self.out
        self._url = self.out.rstrip("/")
        if self.in_bucket:  # the local copy, named by the URL
            key = hashlib.sha256(self._url.encode()).hexdigest()[:12]
            self.local = cache_home() / "runs" / f"{self._url.rsplit('/', 1)[-1]}-{key}"
        else:
            self.local = Path(self.out)  # where the run's files are written
        self._pushed: dict[str, tuple[int, int]] = {}  # name -> (size, mtime) uploaded
        self._last_push = 0.0

    @functools.cached_property
    def remote(self) -> Store | None:
        """The bucket's folder (None for a local run folder); made on first use, as opening
        a bucket's filesystem looks for credentials, which can take seconds."""
        return Store(self.out) if self.in_bucket else None

    def exists(self) -> bool:
        return self.remote.exists() if self.remote else self.local.exists()

    def path(self, name: str) -> str:
        """A file or folder of the run where it lives (a URL for a run in a bucket)."""
        return f"{self._url}/{name}" if self.in_bucket else str(self.local / name)

    def read(self, name: str) -> str | None:
        """A file of the run where it lives; None when there is none."""
        try:
            if self.remote:
                return self.remote.read_text(name)
            return (self.local / name).read_text()
        except FileNotFoundError:
            return None

    def pull(self) -> None:
        """Make the local copy anew from what the run continues (a run in a bucket only);
        the caller holds the run folder's lock, so no other process here writes it."""
        if not self.remote:
            return
        self.local.mkdir(parents=True, exist_ok=True)
        for entry in self.local.iterdir():
            if entry.name in _NEVER_PUSHED:
                continue  # the lock the caller holds
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for name in CONTINUED:
            self.fetch(name)

    def fetch(self, name: str) -> None:
        """Copy one file of a run in a bucket into the local copy, when the bucket has it."""
        if not self.remote or not self.remote.exists(name):
            return
        target = self.local / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(self.remote.read_bytes(name))
        self._pushed[name] = _stamp(target)

    def push(self, *names: str, throttled: bool = False) -> None:
        """Upload what changed in the local copy, or only in its files and folders `names`;
        `throttled`: only when the last push is `PUSH_EVERY_S` old."""
        if not self.remote or (throttled and time.monotonic() - self._last_push < PUSH_EVERY_S):
            return
        self._last_push = time.monotonic()
        for name, file in _files([self.local / n for n in names] or [self.local], self.local):
            try:
                stamp = _stamp(file)
                if self._pushed.get(name) == stamp:
                    continue
                folder, _, base = name.rpartition("/")
                (self.remote / folder if folder else self.remote).write_bytes(base,
                                                                               file.read_bytes())
                self._pushed[name] = stamp
            except FileNotFoundError:
                continue  # gone since it was listed (a writer's temporary file)
            except OSError as error:  # the bucket out of reach for a moment: the next push
                print(f"warning: could not upload {name} to {self.out} ({error}); trying "
                      "again at the next push", file=sys.stderr)

    def forget(self, remote: bool) -> None:
        """Remove the run's local folder (or copy), and with `remote` its bucket folder: a
        start that failed before its first step leaves nothing."""
        shutil.rmtree(self.local, ignore_errors=True)
        if remote and self.remote:
            self.remote.remove()


def _files(tops: list[Path], root: Path):
    """(name relative to `root`, path) of the files in or at `tops`, those pushed only."""
    for top in tops:
        found = [top] if top.is_file() else (Path(directory) / name
                                             for directory, _, names in os.walk(top)
                                             for name in names)
        for file in found:
            relative = file.relative_to(root).as_posix()
            if relative not in _NEVER_PUSHED and not file.name.endswith(".tmp"):
                yield relative, file


def _stamp(file: Path) -> tuple[int, int]:
    info = file.stat()
    return info.st_size, info.st_mtime_ns
