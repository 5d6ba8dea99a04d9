"""A folder on any filesystem fsspec knows: a local path, or a URL (`gs://bucket/path` with
gcsfs, `file://`, `memory://`). Checkpoints go through this one code path wherever they live,
so nothing here relies on what object stores lack: no directory renames, no appends, no
atomic multi-file operations. A file written whole (`write_bytes`) appears whole: under a
plain local path it is written beside and renamed into place; under a URL it is uploaded as
one object, as on a bucket (so `file://` is how tests stand in for gs:// across processes).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import uuid

import fsspec

from core.errors import UserError
from core.json_file import DamagedFile

# what stands in a file's place when it cannot be read: a folder, a link loop, a file
# above it, no permission
UNREADABLE = {errno.EISDIR, errno.ELOOP, errno.ENOTDIR, errno.EACCES}
PROBE_TIMEOUT_S = 5  # how long a first look at a bucket is waited for


class Unanswered(TimeoutError):
    pass


def answered(look):
    """`look()`'s result, or the error it raised, or Unanswered when it takes over
    PROBE_TIMEOUT_S: gcsfs retries a host it cannot reach (no network, no
    credentials) for about a minute, logging a traceback at each attempt. Runs on a daemon
    thread, so a look still stuck ends with the process."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((look(), None))
        except Exception as error:
            outcome.append((None, error))

    with _quiet_storage_logs():
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(PROBE_TIMEOUT_S)
    if not outcome:
        raise Unanswered(f"no answer in {PROBE_TIMEOUT_S} s; check the network, the bucket "
                           "name and credentials (the VM's service account, or gcloud auth "
                           "application-default login)")
    result, error = outcome[0]
    if error is not None:
        raise error
    return result


def reason(error: Exception) -> str:
    """An error of `answered` in a few words."""
    return str(error) if isinstance(error, Unanswered) else f"{type(error).__name__}: {error}"


@contextlib.contextmanager
def _quiet_storage_logs():
    """gcsfs logs every failed attempt with its traceback; the one-line error says it all."""
    loggers = [logging.getLogger(name) for name in ("gcsfs", "fsspec")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def local_folder(path: str | os.PathLike, option: str) -> str:
    """`path` for a command that writes a local folder; a URL there is refused in one line
    (a path like gs://b/x would otherwise become a local folder named `gs:`)."""
    path = os.fspath(path)
    if "://" in path:
        raise UserError(f"{option} {path}: this writes a local folder; give a local path, "
                        f"then copy it to the bucket (gcloud storage cp -r PATH {path})")
    return path


class Store:
    def __init__(self, location: str | os.PathLike):
        location = os.fspath(location)
        self.fs, self.root = fsspec.core.url_to_fs(location)
        self.root = self.root.rstrip("/") or "/"
        self.local = "://" not in location  # a plain path: a disk, where renames are atomic

    @property
    def url(self) -> str:
        """What a user would type for this folder (a plain path when it is local)."""
        return self.root if self.local else self.fs.unstrip_protocol(self.root)

    def __str__(self) -> str:
        return self.url

    def __truediv__(self, name: str) -> Store:
        child = Store.__new__(Store)
        child.fs, child.root, child.local = self.fs, f"{self.root}/{name}", self.local
        return child

    @property
    def parent(self) -> Store:
        parent = Store.__new__(Store)
        parent.fs, parent.local = self.fs, self.local
        parent.root = self.root.rsplit("/", 1)[0] or "/"
        return parent

    @property
    def name(self) -> str:
        return self.root.rsplit("/", 1)[-1]

    def path(self, name: str = "") -> str:
        return f"{self.root}/{name}" if name else self.root

    def exists(self, name: str = "") -> bool:
        return self.fs.exists(self.path(name))

    def is_dir(self) -> bool:
        return self.fs.isdir(self.root)

    def children(self) -> list[str]:
        """Names of the folders directly inside (none if this folder does not exist)."""
        try:
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1]
                      for e in entries if e["type"] == "directory")

    def files(self) -> dict[str, int]:
        """Every file below, by path relative to this folder, with its size in bytes."""
        try:
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            return {}
        prefix = self.root + "/"
        return {name[len(prefix):]: info["size"] for name, info in found.items()
                if info["type"] == "file" and name.startswith(prefix)}

    def size(self, name: str) -> int:
        return self.fs.size(self.path(name))

    def open(self, name: str, mode: str = "rb"):
        return self.fs.open(self.path(name), mode)

    def read_bytes(self, name: str) -> bytes:
        """A file's bytes; FileNotFoundError when there is none, DamagedFile naming it when
        something else is in its place (a folder, a link loop) or it cannot be read."""
        try:
            return self.fs.cat_file(self.path(name))
        except OSError as error:
            if error.errno not in UNREADABLE:
                raise
            raise DamagedFile(f"{self.path(name)} cannot be read ({error.strerror}); "
                              "restore it or remove it") from None

    def read_text(self, name: str) -> str:
        try:
            return self.read_bytes(name).decode()
        except UnicodeDecodeError as error:
            raise DamagedFile(f"{self.path(name)} is damaged (not UTF-8 text at byte "
                              f"{error.start}); restore it or remove it") from None

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write a whole file; readers see the old file or the new one, never a part."""
        self.makedirs()
        if not self.local:
            self.fs.pipe_file(self.path(name), data)
            return
        tmp = self.path(f".{name}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, self.path(name))

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode())

    def makedirs(self) -> None:
        self.fs.makedirs(self.root, exist_ok=True)

    def remove(self, name: str = "") -> None:
        """Delete a file or a whole folder; missing is fine."""
        try:
            self.fs.rm(self.path(name), recursive=True)
        except FileNotFoundError:
            pass

    def move(self, new_name: str) -> Store:
        """Move this folder to a sibling name (a rename on local disks, copies on buckets)."""
        target = Store.__new__(Store)
        parent = self.root.rsplit("/", 1)[0]
        target.fs, target.root, target.local = self.fs, f"{parent}/{new_name}", self.local
        self.fs.mv(self.root, target.root, recursive=True)
        return target
