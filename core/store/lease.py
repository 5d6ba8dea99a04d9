"""Who may write a checkpoint location: the run that first saved there (its owner), and
of that run one process at a time (its lease). Both are small files in the location itself,
so they work where the location is a bucket shared by many VMs:

    LOCATION/owner.json   the owning run: its id (RUN/run-id), model and run folder
    LOCATION/lease.json   the process writing now: run id, host, pid and a heartbeat time

A run that meets a location owned by another run is refused before anything is written. A
lease whose heartbeat is older than the timeout was left by a process that is gone (a
preempted VM) and is taken over with a warning; a fresh lease of another run is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import sys
import threading
import time

from core.errors import UserError
from core.json_file import json_object
from core.store.location import Store
from core.store.run_folder import RUN_ID, alive

OWNER_FILE = "owner.json"
LEASE_FILE = "lease.json"


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    run_id: str | None  # None: a run folder that has never trained
    model_name: str
    family: str
    out: str


def check_owner(location: Store, me: RunIdentity) -> None:
    """Refuse, in one line, a location another run owns (reads only)."""
    owner = _read(location, OWNER_FILE)
    if owner is None or (me.run_id and owner.get("run_id") == me.run_id):
        return
    if owner.get("out") == me.out and not me.run_id:
        raise UserError(
            f"checkpoint location {location} belongs to the run of {me.out}, but "
            f"{me.out}/{RUN_ID} is missing (deleted?); if this is that run, restore it with "
            f"`echo {owner.get('run_id')} > {me.out}/{RUN_ID}`, else use another --out"
        )
    what = (f"a {owner.get('family')} run" if owner.get("family") != me.family
            else "another run")
    raise UserError(
        f"checkpoint location {location} belongs to {what} ({owner.get('model_name')}, run "
        f"folder {owner.get('out')}); use another checkpoint_dir, or resume that run with "
        f"--out {owner.get('out')}"
    )


@contextlib.contextmanager
def leased(location: Store, me: RunIdentity, timeout_s: float):
    """Hold `location` for this process while the block runs: owner recorded on first use,
    a heartbeat every timeout_s / 4, the lease removed at the end."""
    check_owner(location, me)
    mine = {"run_id": me.run_id, "host": socket.gethostname(), "pid": os.getpid()}
    _take(location, mine, timeout_s)
    if _read(location, OWNER_FILE) is None:
        location.write_text(OWNER_FILE, json.dumps(dataclasses.asdict(me)))
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(location, mine, timeout_s / 4, stop),
                            daemon=True, name="checkpoint-lease")
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        if _holder(_read(location, LEASE_FILE)) == mine:
            location.remove(LEASE_FILE)


def _take(location: Store, mine: dict, timeout_s: float) -> None:
    lease = _read(location, LEASE_FILE)
    if lease is not None and _holder(lease) != mine:
        age = time.time() - lease.get("heartbeat", 0)
        holder = (f"pid {lease.get('pid')} on host {lease.get('host')}, heartbeat "
                  f"{age:.0f} s ago")
        if age < timeout_s and not _dead_here(lease, mine):
            raise UserError(
                f"checkpoint location {location} is being written by {holder}; wait for that "
                f"run to end, or use another checkpoint_dir (a lease older than "
                f"checkpoint_lease_s={timeout_s:g} is taken over)"
            )
        print(f"warning: taking over {location}/{LEASE_FILE} from {holder}",
              file=sys.stderr)
    _write_lease(location, mine)
    if _holder(_read(location, LEASE_FILE)) != mine:  # another process wrote at once
        raise UserError(f"checkpoint location {location} was claimed by another process "
                        "at the same moment; rerun once it has started, or use another "
                        "checkpoint_dir")


def _heartbeat(location: Store, mine: dict, every_s: float, stop: threading.Event) -> None:
    while not stop.wait(every_s):
        try:
            _write_lease(location, mine)
        except Exception as error:  # a flaky bucket: the next beat tries again
            print(f"warning: checkpoint lease heartbeat failed: {error}", file=sys.stderr)


def _write_lease(location: Store, mine: dict) -> None:
    location.write_text(LEASE_FILE, json.dumps({**mine, "heartbeat": time.time()}))


def _holder(lease: dict | None) -> dict | None:
    return None if lease is None else {k: lease.get(k) for k in ("run_id", "host", "pid")}


def _dead_here(lease: dict, mine: dict) -> bool:
    """A lease left by a process of this host that no longer runs (a crash, a kill -9)."""
    return lease.get("host") == mine["host"] and not alive(lease.get("pid"))


def _read(location: Store, name: str) -> dict | None:
    try:
        text = location.read_text(name)
    except FileNotFoundError:
        return None
    return json_object(text, f"{location}/{name}",
                       f"if no run is writing {location}, remove it")
