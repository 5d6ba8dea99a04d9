"""core/store/lease.py: a checkpoint location has one owning run and one writing
process; leases of processes that are gone are taken over, live ones refused."""

import json
import os
import socket
import subprocess
import time

import pytest

from core.errors import UserError
from core.store.lease import LEASE_FILE, OWNER_FILE, RunIdentity, check_owner, leased
from core.store.location import Store

ME = RunIdentity(run_id="run-a", model_name="llama-tiny", family="llama", out="/runs/a")


def a_dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def write_lease(location: Store, **lease) -> None:
    location.write_text(LEASE_FILE, json.dumps({"run_id": "run-b", "host": "other-vm",
                                                "pid": 1, "heartbeat": time.time(), **lease}))


def test_the_first_run_becomes_the_owner_and_releases_its_lease(tmp_path):
    location = Store(tmp_path / "ck")
    with leased(location, ME, timeout_s=60):
        lease = json.loads(location.read_text(LEASE_FILE))
        assert (lease["run_id"], lease["pid"]) == ("run-a", os.getpid())
    assert json.loads(location.read_text(OWNER_FILE))["run_id"] == "run-a"
    assert not location.exists(LEASE_FILE)
    with leased(location, ME, timeout_s=60):  # the owner comes back: a resume
        pass


@pytest.mark.parametrize("other, refusal", [
    (RunIdentity(None, "llama-tiny", "llama", "/runs/new"), "belongs to another run"),
    (RunIdentity("run-m", "mixtral-tiny", "mixtral", "/runs/m"), "belongs to a llama run"),
])
def test_another_run_is_refused_before_writing(tmp_path, other, refusal):
    location = Store(tmp_path / "ck")
    with leased(location, ME, timeout_s=60):
        pass
    before = location.files()
    with pytest.raises(UserError, match=refusal + r".*--out /runs/a"):
        check_owner(location, other)
    with pytest.raises(UserError, match=refusal):
        with leased(location, other, timeout_s=60):
            pass
    assert location.files() == before


def test_a_live_lease_is_refused(tmp_path):
    location = Store(tmp_path / "ck")
    write_lease(location, run_id="run-a", heartbeat=time.time() - 5)
    with pytest.raises(UserError, match="being written by pid 1 on host other-vm, heartbeat 5 s"):
        with leased(location, ME, timeout_s=60):
            pass


@pytest.mark.parametrize("lease", [
    {"heartbeat": time.time() - 3600},  # silent for an hour: a preempted VM
    {"host": socket.gethostname(), "pid": a_dead_pid()},  # a crashed process of this host
], ids=["stale", "dead-here"])
def test_a_lease_left_behind_is_taken_over(tmp_path, capsys, lease):
    location = Store(tmp_path / "ck")
    write_lease(location, run_id="run-a", **lease)
    with leased(location, ME, timeout_s=60):
        assert json.loads(location.read_text(LEASE_FILE))["pid"] == os.getpid()
    assert "warning: taking over" in capsys.readouterr().err


def test_the_heartbeat_keeps_the_lease_fresh(tmp_path):
    location = Store(tmp_path / "ck")
    with leased(location, ME, timeout_s=0.2):
        first = json.loads(location.read_text(LEASE_FILE))["heartbeat"]
        time.sleep(0.3)
        assert json.loads(location.read_text(LEASE_FILE))["heartbeat"] > first


@pytest.mark.parametrize("name", [LEASE_FILE, OWNER_FILE])
@pytest.mark.parametrize("text", ["{half", "[]", "3"])
def test_a_damaged_lease_or_owner_says_so(tmp_path, name, text):
    """Not JSON, or JSON of another shape: one line naming the file, never AttributeError."""
    location = Store(tmp_path / "ck")
    location.write_text(name, text)
    with pytest.raises(UserError, match=f"{name} is damaged .*; if no run is writing"):
        with leased(location, ME, timeout_s=60):
            pass

