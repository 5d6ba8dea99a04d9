"""Option types shared by the `zoo` commands.

Every path a command reads or writes is a `PathArg`: its kind (a file or a folder, read or
written) is declared where the option is, so one check answers a missing, misplaced,
unreadable or looping path in one line before the command starts, and the damage matrix
(tests/e2e/test_damage_matrix.py) finds every path a command takes. A string that is not a
local path although its name says so (a GCE disk) is a `NotAPath`."""

from __future__ import annotations

import errno
import math
import os
import socket
import threading

import click

URL_SCHEMES = ("gs", "gcs", "file", "memory")  # what the run store (fsspec) is given
STORAGE_HOST = "storage.googleapis.com"
REACH_TIMEOUT_S = 3.0  # a name lookup offline fails at once; a slow resolver is given this


class FiniteRange(click.FloatRange):
    """click's FloatRange, which lets nan (and inf, without a maximum) through: refused too."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number.", param, ctx)
        return number


class PathArg(click.ParamType):
    """A local path a command reads (`reads`) or writes, a `file` or a `folder`; `what`
    says what to give instead ("a YAML config file").

    `urls`: a bucket URL (gs://...) is taken too, once its host answers a name lookup (an
    offline machine is told at once, not after a minute of retries). `name`: a predicate
    for values that are names rather than paths (a suite, lm-eval tasks, a Hub model) when
    nothing by that name is on disk; they pass unchecked. For a written file: `suffix` is
    required, and an existing folder given instead gets `file_in_folder` inside it. `text`:
    a file read must be UTF-8 text (a small one: a config, a suite, a results file).
    A refusal is one line: the option (or `zoo COMMAND ARG`), the path, and why."""

    def __init__(self, kind: str, reads: bool, what: str, *, urls: bool = False,
                 name=None, suffix: str | None = None, file_in_folder: str | None = None,
                 text: bool = False):
        assert kind in ("file", "folder")
        self.kind, self.reads, self.what, self.urls, self.text = kind, reads, what, urls, text
        self.is_name, self.suffix, self.file_in_folder = name, suffix, file_in_folder
        self.name = kind

    def convert(self, value, param, ctx):
        value = os.fspath(value)
        try:
            if "://" in value:
                return self._url(value)
            if self.is_name and not os.path.lexists(value) and self.is_name(value):
                return value
            return self._check_read(value) if self.reads else self._check_write(value)
        except _Refused as refused:
            hint = (param.opts[0] if isinstance(param, click.Option) else
                    f"{ctx.command_path} {param.human_readable_name}")
            raise click.UsageError(f"{hint} {value}: {refused}", ctx) from None

    def _url(self, value: str) -> str:
        scheme = value.split("://", 1)[0].lower()
        if not self.urls:
            if self.reads:
                raise _Refused(f"a URL; give {self.what} on this machine")
            raise _Refused(f"this writes a local {self.kind}; give a local path, then copy "
                           f"it to the bucket (gcloud storage cp -r PATH {value})")
        if scheme not in URL_SCHEMES:
            raise _Refused(f"zoo reads and writes gs:// buckets, not {scheme}:// URLs")
        if scheme in ("gs", "gcs"):
            reachable(STORAGE_HOST)
        return value

    def _check_read(self, path: str) -> str:
        kind = _kind(path)
        if kind is None:
            raise _Refused(f"no such {self.kind}; give {self.what}")
        if kind != self.kind:
            raise _Refused(f"a {kind}, not a {self.kind}; give {self.what}")
        if not os.access(path, os.R_OK | (os.X_OK if kind == "folder" else 0)):
            raise _Refused("cannot be read (permission denied)")
        if self.text:
            _check_text(path, self.what)
        return path

    def _check_write(self, path: str) -> str:
        kind = _kind(path)
        if self.kind == "file":
            if kind == "folder" and self.file_in_folder:
                path = os.path.join(path, self.file_in_folder)
                kind = _kind(path)
            if self.suffix and not path.lower().endswith(self.suffix):
                raise _Refused(f"not a {self.suffix} name; give {self.what}")
        if kind is not None and kind != self.kind:
            raise _Refused(f"a {kind}, not a {self.kind}; give {self.what}")
        existing = path if kind is not None else _first_existing_parent(path)
        if not os.access(existing, os.W_OK | (os.X_OK if os.path.isdir(existing) else 0)):
            raise _Refused(f"cannot write {existing} (permission denied)")
        return path


class _Refused(Exception):
    """Why a path is refused, in a few words (the option and the path are added)."""


def _check_text(path: str, what: str) -> None:
    try:
        with open(path, "rb") as file:
            file.read().decode()
    except UnicodeDecodeError as error:
        raise _Refused(f"not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
                       f"{error.start}); give {what}") from None
    except OSError as error:
        raise _Refused(_why(path, error)) from None


def _kind(path: str) -> str | None:
    """"file" or "folder" for what `path` is on disk (through links), None when there is
    nothing; _Refused for a link loop, a path under a file, or a folder not searchable."""
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ENOENT:
            _first_existing_parent(path)  # a loop or a file higher up is said as such
            return None
        raise _Refused(_why(path, error)) from None
    return "folder" if os.path.isdir(path) else "file"


def _first_existing_parent(path: str) -> str:
    """The nearest folder above `path` that exists; _Refused when it is a file, a link
    loop or unreadable."""
    parent = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            os.stat(parent)
        except OSError as error:
            if error.errno == errno.ENOENT:
                parent = os.path.dirname(parent)
                continue
            raise _Refused(_why(parent, error)) from None
        if not os.path.isdir(parent):
            raise _Refused(f"{parent} is a file, not a folder")
        return parent


def _why(path: str, error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return f"{path} is a loop of symbolic links"
    if error.errno == errno.ENOTDIR:
        return f"{_file_above(path)} is a file, not a folder"
    if error.errno == errno.EACCES:
        return f"{path} cannot be read (permission denied)"
    return f"{path}: {error.strerror}"


def _file_above(path: str) -> str:
    """The file that a path under a file goes through."""
    parent = os.path.dirname(os.path.abspath(path))
    while parent != os.path.dirname(parent):
        if os.path.isfile(parent):
            return parent
        parent = os.path.dirname(parent)
    return path


def reachable(host: str) -> None:
    """_Refused unless `host` resolves within REACH_TIMEOUT_S: with no network a bucket's
    client retries for about a minute before it says so."""
    answer: list = []

    def look() -> None:
        try:
            answer.append(socket.getaddrinfo(host, 443))
        except OSError as error:
            answer.append(error)

    worker = threading.Thread(target=look, daemon=True)
    worker.start()
    worker.join(REACH_TIMEOUT_S)
    if not answer or isinstance(answer[0], OSError):
        why = "no answer" if not answer else answer[0].strerror or answer[0]
        raise _Refused(f"cannot reach {host} ({why}); check the network, or give a local "
                       "path")


def hub_name(value: str) -> bool:
    """A Hugging Face Hub name (org/model) rather than a local path: nothing on disk, not
    written as a path (./, ../, /, ~)."""
    return not value.startswith((".", "/", "~")) and value.count("/") <= 1


def plain_name(value: str) -> bool:
    """A name (a suite, a comma list of tasks) rather than a path: no folder in it, no
    YAML suffix."""
    return os.sep not in value and not value.endswith((".yaml", ".yml"))


def task_names(value: str) -> bool:
    """lm-eval task names, comma-separated (a folder among them is checked by eval)."""
    return "," in value or plain_name(value)
