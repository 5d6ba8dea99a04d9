"""A run folder has one writer at a time (RUN/.lock): a second run fails at once naming who
holds it; a lock left by a dead process is taken over with a warning."""

import errno
import json
import os
import socket
import subprocess
import sys

import pytest

from core.errors import UserError
from core.store.run_folder import RunFolder


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_second_writer_is_refused_naming_host_and_pid(tmp_path):
    run = RunFolder(tmp_path / "run")
    with run.locked():
        holder = json.loads(run.lock_file.read_text())
        with pytest.raises(UserError, match=f"in use by pid {holder['pid']} on host"):
            with run.locked():
                pass
    assert not run.lock_file.exists()


def test_a_lock_held_on_another_host_is_refused(tmp_path):
    run = RunFolder(tmp_path)
    run.lock_file.write_text(json.dumps({"host": "other-host", "pid": dead_pid()}))
    with pytest.raises(UserError, match="on host other-host"):
        with run.locked():
            pass
    assert json.loads(run.lock_file.read_text())["host"] == "other-host"  # left as it was


@pytest.mark.parametrize("stale", ["dead process", "half-written", "a list", "a number"])
def test_a_stale_lock_is_taken_over_with_a_warning(tmp_path, capsys, stale):
    run = RunFolder(tmp_path)
    text = {"dead process": json.dumps({"host": socket.gethostname(), "pid": dead_pid()}),
            "half-written": "", "a list": "[]", "a number": "7"}[stale]
    run.lock_file.write_text(text)
    with run.locked():
        assert json.loads(run.lock_file.read_text())["pid"] == os.getpid()
    assert "warning: taking over" in capsys.readouterr().err
    assert not run.lock_file.exists()


def test_a_lock_is_never_seen_empty(tmp_path):
    """The lock is hard-linked into place complete: a second start at the same moment reads
    a live holder (and is refused), never an empty file it would take over."""
    run = RunFolder(tmp_path)
    with run.locked():
        assert json.loads(run.lock_file.read_text())["pid"] == os.getpid()
        assert [p.name for p in tmp_path.iterdir()] == [".lock"]  # no draft left


@pytest.mark.parametrize("fault", [errno.EROFS, errno.ENOSPC])
def test_a_disk_that_refuses_the_lock_is_one_line_and_leaves_no_folder(tmp_path, monkeypatch,
                                                                         fault):
    def refuse(*args, **kwargs):
        raise OSError(fault, os.strerror(fault))

    monkeypatch.setattr(os, "link", refuse)
    run = RunFolder(tmp_path / "runs" / "new")
    with pytest.raises(UserError, match=f"cannot write the run folder .*{os.strerror(fault)}"):
        with run.locked():
            pass
    assert not run.path.exists()
