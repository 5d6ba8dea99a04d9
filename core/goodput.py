"""Goodput: where a run's wall time went, summed over every attempt of the run (restarts,
preemptions, a VM recreated with the run in a bucket).

Each process that trains the run is an attempt. It records its wall time, from the
program's start (core/program_start.py) to its last heartbeat, split into categories; the
categories' names are those of MaxText's goodput library (ml-goodput-measurement's
`BadputType`, lower case) where they mean the same:

- `productive`: train steps that did not compile;
- `training_prep`: process start to the first step, restore excluded: imports, the
  runtime and its devices, the model, its sharding, the data (MaxText splits off
  `tpu_initialization`; here it is part of this);
- `program_startup`: the train steps that compiled;
- `data_loading`: waiting for the next batch;
- `unproductive_checkpoint_save_time`, `unproductive_checkpoint_restore_time`: the part of
  a save the loop waits for, and the restore;
- `evaluation`: the task's work between steps (validation, sampling; MaxText has it as a
  custom badput);
- `wasted_progress_from_disruption`: the productive time of steps a later attempt did
  again, because the attempt ended after its last usable checkpoint;
- `other`: the rest of the attempt's wall time (logging, exit).

With XLA's asynchronous execution a step's device time can show up in the next wait (data,
save) instead of the step itself; the categories still sum to the wall time.

The attempts live in RUN/goodput.json, rewritten (atomically) at most every
`HEARTBEAT_S`, at each checkpoint and at exit by the run's main host: a process killed
without warning loses at most the time since its last heartbeat from the account, and one
that exits loses the runtime's teardown after its last heartbeat (about 2 s on XLA:CPU)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import time
import uuid
from pathlib import Path

import psutil

from core import program_start
from core.errors import UserError
from core.json_file import DamagedFile, json_object
from core.store.location import answered, reason
from core.store.run_folder import GOODPUT as FILE
from core.store.run_folder import RUN_CONFIG
from core.store.run_home import RunHome

HEARTBEAT_S = 1.0
MEASURED = ("productive", "training_prep", "program_startup", "data_loading",
            "unproductive_checkpoint_save_time", "unproductive_checkpoint_restore_time",
            "evaluation")
CATEGORIES = (*MEASURED, "wasted_progress_from_disruption", "other")
RECORD_KEYS = {"id", "started", "last", "resumed_from", "reached", "productive_at_step",
               "seconds"}
_ended_here = 0.0  # when this process's last attempt ended (a test may train twice)
_current: Attempt | None = None  # this process's newest attempt, closed again at exit


class Attempt:
    """This process's account, kept in `run_dir`/goodput.json beside the run's earlier
    attempts (`write=False`: kept in memory only, as on a host that is not the main one)."""

    def __init__(self, run_dir: Path, write: bool = True):
        self.file, self.write = Path(run_dir) / FILE, write
        # epoch seconds, as time.time(): the program's start, or its last attempt's end
        self.started = max(psutil.Process().create_time(), program_start.marked() or 0.0,
                           _ended_here)
        self.record = {"id": uuid.uuid4().hex, "started": self.started, "last": self.started,
                       "resumed_from": 0, "reached": 0, "productive_at_step": {},
                       "seconds": dict.fromkeys(MEASURED, 0.0)}
        self._last_write = 0.0
        self._earlier: list[dict] | None = None  # the run's earlier attempts, read once
        global _current
        _current = self

    def resumed(self, step: int) -> None:
        self.record["resumed_from"] = self.record["reached"] = step
        self.record["productive_at_step"][str(step)] = 0.0

    def loop_starts(self) -> None:
        """The first step is about to start: what came before (restore excluded) was prep."""
        seconds = self.record["seconds"]
        before = time.time() - self.started - seconds["unproductive_checkpoint_restore_time"]
        seconds["training_prep"] += max(before, 0.0)

    @contextlib.contextmanager
    def timing(self, category: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(category, time.monotonic() - start)

    def add(self, category: str, seconds: float) -> None:
        self.record["seconds"][category] += seconds

    def step_done(self, step: int) -> None:
        self.record["reached"] = step
        self.heartbeat()

    def checkpointed(self, step: int) -> None:
        """A save of `step` was started: a later attempt may resume here, and what this
        attempt did after it would then be done again."""
        self.record["productive_at_step"][str(step)] = self.record["seconds"]["productive"]
        self.heartbeat(force=True)

    def heartbeat(self, force: bool = False) -> None:
        now = time.time()
        self.record["last"] = now
        if self.write and (force or now - self._last_write >= HEARTBEAT_S):
            self._last_write = now
            if self._earlier is None:
                self._earlier = self._read_earlier()
            temporary = self.file.with_name(f".{FILE}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps({"attempts": [*self._earlier, self.record]}) + "\n")
            temporary.replace(self.file)

    def share(self) -> float:
        """The run's goodput so far, every attempt's up to now: what each logged step's
        record carries (metrics.jsonl, TensorBoard, wandb)."""
        if self._earlier is None:
            self._earlier = self._read_earlier()
        return account([*self._earlier, {**self.record, "last": time.time()}])["goodput"]

    def _read_earlier(self) -> list[dict]:
        try:
            return read_attempts(self.file)
        except DamagedFile as error:  # an account is no reason to stop training
            print(f"warning: {error}; the goodput account starts again from this attempt",
                  file=sys.stderr)
            return []

    def close(self) -> None:
        global _ended_here
        if self.file.parent.exists():  # not when the run folder is gone (a test's, removed)
            self.heartbeat(force=True)
        _ended_here = self.record["last"]


@contextlib.contextmanager
def spent_on(category: str):
    """Time of this process's newest attempt spent outside the training loop (the sample
    `zoo train` prints after training), added to `category`."""
    with _current.timing(category) if _current is not None else contextlib.nullcontext():
        yield


@atexit.register
def _close_at_exit() -> None:
    """The newest attempt lasts as long as its process (the sample printed after training,
    the exit), not only to the end of its loop."""
    if _current is not None:
        _current.close()


def read_attempts(file: Path | None = None, text: str | None = None) -> list[dict]:
    """The attempts recorded in a goodput file (or its `text`), oldest first; none when
    there is no file."""
    if text is None:
        try:
            text = Path(file).read_text()
        except FileNotFoundError:
            return []
    remedy = "remove it: the next attempt starts a new one"
    attempts = json_object(text, str(file or FILE), remedy).get("attempts", [])
    if not isinstance(attempts, list) or not all(
            isinstance(a, dict) and RECORD_KEYS <= set(a) for a in attempts):
        raise DamagedFile(f"{file or FILE} is damaged (its attempts are not zoo's records); "
                          f"{remedy}")
    return sorted(attempts, key=lambda a: a["started"])


def account(attempts: list[dict]) -> dict:
    """The run's wall time (its attempts' together; the time between attempts, when no
    process ran, is `between_attempts`, not part of it), seconds per category, the goodput
    (productive / wall), the steps done again, and each attempt's own account."""
    rows = []
    for index, attempt in enumerate(attempts):
        seconds = {c: attempt["seconds"].get(c, 0.0) for c in MEASURED}
        wall = attempt["last"] - attempt["started"]
        redone_from = attempts[index + 1]["resumed_from"] if index + 1 < len(attempts) else None
        wasted, lost_steps = 0.0, 0
        if redone_from is not None and redone_from < attempt["reached"]:
            lost_steps = attempt["reached"] - max(redone_from, attempt["resumed_from"])
            kept = attempt["productive_at_step"].get(str(redone_from), 0.0)
            wasted = max(seconds["productive"] - kept, 0.0)
        seconds["productive"] -= wasted
        seconds["wasted_progress_from_disruption"] = wasted
        seconds["other"] = max(wall - sum(seconds.values()), 0.0)
        rows.append({"started": attempt["started"], "wall_s": wall, "seconds": seconds,
                     "resumed_from": attempt["resumed_from"], "reached": attempt["reached"],
                     "lost_steps": lost_steps})
    wall = sum(r["wall_s"] for r in rows)
    total = {c: sum(r["seconds"][c] for r in rows) for c in CATEGORIES}
    between = sum(max(b["started"] - a["started"] - a["wall_s"], 0.0)
                  for a, b in zip(rows, rows[1:]))
    goodput = total["productive"] / wall if wall else 0.0
    return {"wall_s": wall, "seconds": total, "goodput": goodput,
            "lost_steps": sum(r["lost_steps"] for r in rows), "between_attempts_s": between,
            "attempts": rows}


def describe(summary: dict) -> str:
    """The account as a table: each category's seconds and share of the wall time."""
    wall = summary["wall_s"]
    lines = [f"goodput {summary['goodput']:.1%} of {wall:.1f} s over "
             f"{len(summary['attempts'])} attempt(s); {summary['lost_steps']} step(s) done "
             f"again after a restart; {summary['between_attempts_s']:.1f} s between attempts "
             "(no process running, not counted)"]
    for category in CATEGORIES:
        seconds = summary["seconds"][category]
        lines.append(f"  {category:38s} {seconds:10.1f} s  {seconds / wall if wall else 0:6.1%}")
    return "\n".join(lines)


def run_account(out: str) -> dict:
    """The account of the run at `out` (a folder or a bucket URL); one line when `out` is
    not a run or holds no account."""
    home = RunHome(out)
    text = _read(home, FILE)
    if text is None:
        if _read(home, RUN_CONFIG) is None:
            raise UserError(f"{out} is not a run folder (no {RUN_CONFIG}); give the --out of "
                            "a `zoo train` run")
        raise UserError(f"{out} has no {FILE}: it has not trained a step since zoo records "
                        "goodput; train it (a rerun resumes) to start the account")
    attempts = read_attempts(text=text, file=home.path(FILE))
    if not attempts:
        raise UserError(f"{home.path(FILE)} holds no attempt; remove it: the next attempt "
                        "starts a new one")
    return account(attempts)


def _read(home: RunHome, name: str) -> str | None:
    """A file of the run (None when there is none), in one line when it cannot be read: a
    bucket out of reach (answered within seconds), a file that is not text."""
    try:
        text = answered(lambda: home.read(name)) if home.in_bucket else home.read(name)
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read {home.path(name)}: {reason(error)}") from None
    return text


# the order a bar stacks its categories in: start-up first, as an attempt spends it
PLOT_ORDER = ("training_prep", "unproductive_checkpoint_restore_time", "program_startup",
              "productive", "data_loading", "unproductive_checkpoint_save_time", "evaluation",
              "wasted_progress_from_disruption", "other")
PLOT_AXIS = "seconds of the attempt, by category (a breakdown: steps, waits and saves interleave)"


def bars(summary: dict) -> list[tuple[int, str, float, float]]:
    """(attempt index, category, left, width) of each segment of the breakdown chart: one
    bar per attempt from 0 to its wall time. Only start-up has a place in time (before the
    first step); the loop's categories alternate step by step, so a bar shows how much of
    each, not when."""
    segments = []
    for index, row in enumerate(summary["attempts"]):
        left = 0.0
        for category in PLOT_ORDER:
            width = row["seconds"][category]
            segments.append((index, category, left, width))
            left += width
    return segments


def plot(summary: dict, path: str | os.PathLike) -> None:
    """Where each attempt's time went, by category (a PNG at `path`, its folder made)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["attempts"]
    origin = rows[0]["started"]
    figure, axes = plt.subplots(figsize=(10, 1.2 + 0.5 * len(rows)))
    colours = plt.get_cmap("tab10")
    for index, category, left, width in bars(summary):
        axes.barh(index, width, left=left, color=colours(PLOT_ORDER.index(category)),
                  label=category if index == 0 else None)
    axes.set_yticks(range(len(rows)), [f"attempt {i + 1} (+{row['started'] - origin:.0f} s)"
                                       for i, row in enumerate(rows)])
    axes.invert_yaxis()
    axes.set_xlabel(PLOT_AXIS)
    axes.set_title(f"goodput {summary['goodput']:.1%} of {summary['wall_s']:.0f} s; "
                   f"{summary['between_attempts_s']:.0f} s between attempts (not drawn)")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, fontsize="small")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, bbox_inches="tight", dpi=120, format="png")
    plt.close(figure)
