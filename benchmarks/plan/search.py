"""`zoo plan MODEL --tpu TYPE --search`: the configuration of a slice with the highest
projected throughput, chosen by the TPU compiler. The analytic plan prunes the space
(benchmarks/plan/search_space.py); the survivors are compiled by libtpu in worker processes
(benchmarks/plan/search_worker.py), best estimate first, each bounded in time; a compiled
result rules out what it makes pointless (a fitting one: the same layout with less batch or
more recompute; a refused one: the same with more batch or less fsdp); between a fitting
and a refused batch the largest that fits is bisected. Ranked by the step model's projected
throughput with communication exposed (benchmarks/plan/step_model.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import psutil
from tqdm import tqdm

from benchmarks.plan.search_space import (
    ESTIMATE_FLOOR,
    Candidate,
    Space,
    compile_order,
    search_space,
)
from benchmarks.plan.search_worker import MARK
from core import runtime
from core.errors import UserError
from core.table import format_bytes, format_table

COMPILE_LIMIT_S = 30 * 60  # a compile still running after this is stopped
MEMORY_MARGIN = 1.25  # host memory a worker may grow beyond the first compile's peak
RECYCLE_SHARE = 0.25  # of the host's memory: a worker that grew past it is replaced


@dataclasses.dataclass
class Outcome:
    """What compiling one candidate gave."""

    candidate: Candidate
    status: str  # "fits", "refused" (by the compiler's memory), "error", "timed out"
    seconds: float
    record: dict | None = None  # the compiled plan's record (tpu_step.CompiledPlan.record)
    detail: str = ""

    @property
    def step_s(self) -> float:
        return projected_step_seconds(self.record)

    @property
    def mfu(self) -> float:
        return projected_mfu(self.record, self.candidate.plan.topology)

    @property
    def items_per_second_per_chip(self) -> float:
        chips = self.candidate.plan.topology.chips
        return self.candidate.items_per_step / chips / self.step_s

    @property
    def hbm_bytes(self) -> float | None:
        compiled = (self.record or {}).get("hbm_per_chip", {}).get("compiled", {})
        return compiled.get("total") or compiled.get("program_at_least")

    def row(self) -> dict:
        """One candidate as the JSON output gives it."""
        candidate = self.candidate
        row = {"overrides": " ".join(candidate.overrides), "status": self.status,
               "sharding": candidate.sharding, "mesh": dict(candidate.mesh),
               "remat": candidate.remat, "batch_per_device": candidate.batch_per_device,
               "compile_seconds": round(self.seconds, 1), "hbm_per_chip": self.hbm_bytes,
               **({"detail": self.detail} if self.detail else {})}
        if self.status == "fits":
            row.update(step_seconds=self.step_s, mfu=self.mfu,
                       model_flops_per_chip=self.record["flops_per_chip"]["analytic_model"],
                       items_per_second_per_chip=self.items_per_second_per_chip)
        return row


def projected_step_seconds(record: dict) -> float:
    """A compiled plan's projected step (its `--json` record), communication exposed, with
    the HBM term of loop bodies counted every trip: the compiler's cost analysis counts a
    loop body once, which would make a scanned stack look up to its depth times lighter on
    memory than the same stack unrolled. Each trip is taken to move bytes as it does
    matmul FLOPs."""
    step, flops = record["projected_step"], record["flops_per_chip"]
    once = flops["compiled_matmul_loop_bodies_once"]
    memory = step["memory_s"] * (flops["compiled_matmul"] / once if once else 1.0)
    return max(step["compute_s"], memory) + step["communication_s"] + step["dcn_s"]


def projected_mfu(record: dict, topo) -> float:
    """Model FLOPs per chip over the step above at the chip's peak."""
    model_flops = record["flops_per_chip"]["analytic_model"]
    return model_flops / (projected_step_seconds(record) * topo.peak_bf16_flops_per_chip)


@dataclasses.dataclass
class SearchResult:
    model: str
    tpu: str
    user_overrides: list[str]
    space: Space
    outcomes: list[Outcome]
    ruled_out: int  # candidates a compiled result made pointless
    below_floor: int  # estimated below ESTIMATE_FLOOR of the best fitting one
    seconds: float
    jobs: int
    item: str  # what a step's items are: tokens or examples

    @property
    def ranked(self) -> list[Outcome]:
        fitting = [o for o in self.outcomes if o.status == "fits"]
        return sorted(fitting, key=lambda o: -o.items_per_second_per_chip)

    @property
    def winner(self) -> Outcome:
        return self.ranked[0]

    def train_command(self) -> str:
        return " ".join(["zoo train", self.model, "--tpu", self.tpu, *self.user_overrides,
                         *self.winner.candidate.overrides])

    def record(self) -> dict:
        space = self.space
        return {
            "model": self.model, "slice": self.tpu, "item": self.item,
            "space": {"considered": space.considered, "invalid": len(space.invalid),
                      "above_hbm_analytic": space.unfit,
                      "below_estimate_floor": self.below_floor,
                      "ruled_out_by_compiled": self.ruled_out, "compiled": len(self.outcomes)},
            "search_seconds": round(self.seconds, 1), "jobs": self.jobs,
            "ranked": [o.row() for o in self.ranked],
            "not_fitting": [o.row() for o in self.outcomes if o.status != "fits"],
            "winner_overrides": " ".join(self.winner.candidate.overrides),
            "train_command": self.train_command(),
        }


def search(model: str, tpu: str, overrides: list[str], budget_minutes: float | None,
           jobs: int | None, max_batch: int, echo: Callable[..., object],
           compile_: bool = False) -> SearchResult:
    """Search and compile; `echo(text, err=True)` says what is happening on stderr.
    `compile_` (`--search --compile`): accepted, as the search compiles every configuration
    it keeps anyway; it is said once, so nobody waits for a second compile."""
    started = time.monotonic()
    space = search_space(model, tpu, overrides, max_batch)
    if not space.candidates:
        raise UserError(_empty_space(model, tpu, space))
    if compile_:
        echo("--search compiles every configuration it keeps: --compile adds nothing",
             err=True)
    echo(f"{space.considered} configurations of {model} on {tpu}; compiling the "
         f"{len(space.candidates)} the analytic plan keeps, best estimate first, until the "
         "compiled ones rule out the rest" + (f" or {budget_minutes:g} min pass"
                                             if budget_minutes else ""), err=True)
    deadline = started + budget_minutes * 60 if budget_minutes else None
    scheduler = Scheduler(space, jobs, deadline)
    with workers_stopped_on_exit(scheduler):
        scheduler.run(model, tpu)
    item = "tokens" if hasattr(space.planner.base.config, "seq_len") else "examples"
    result = SearchResult(model, tpu, overrides, space, scheduler.outcomes,
                          scheduler.ruled_out, scheduler.below_floor,
                          time.monotonic() - started, scheduler.allowed,
                          item)
    if not result.ranked:
        raise UserError(_nothing_fits(result, budget_minutes))
    return result


def _empty_space(model: str, tpu: str, space: Space) -> str:
    if space.closest_unfit is not None:
        plan = space.closest_unfit
        return (f"no configuration of {model} fits {tpu}: the smallest needs "
                f"{format_bytes(plan.total)} of {format_bytes(plan.hbm_bytes)} HBM per chip "
                "(analytic); use a larger slice, a smaller seq_len, or pin fewer keys")
    reason = space.invalid[0] if space.invalid else "nothing was left to search"
    return (f"every configuration of {model} on {tpu} that the pinned keys allow is refused "
            f"({len(space.invalid)} of {space.considered}), e.g.: {reason}")


def _nothing_fits(result: SearchResult, budget_minutes: float | None) -> str:
    outcomes = result.outcomes
    finished = [o for o in outcomes if o.status != "timed out"]
    if budget_minutes and not finished:
        return (f"--budget {budget_minutes:g} min ran out before the first compile of "
                f"{result.model} for {result.tpu} finished; raise --budget")
    if budget_minutes and len(finished) < len(outcomes):
        return (f"--budget {budget_minutes:g} min ran out before a configuration of "
                f"{result.model} that fits {result.tpu} was compiled ({len(finished)} "
                "compiled, none fits); raise --budget")
    statuses = ", ".join(sorted({o.status for o in outcomes}))
    first = next((o.detail for o in outcomes if o.detail), "")
    return (f"none of the {len(outcomes)} compiled configurations of {result.model} fits "
            f"{result.tpu} ({statuses}{': ' + first if first else ''}); use a larger slice "
            "or a smaller seq_len")


@contextlib.contextmanager
def workers_stopped_on_exit(scheduler: Scheduler):
    """The compile processes end with the search, however it ends: they run in sessions of
    their own (a compile stopped for its time is killed with its children), so neither
    Ctrl-C nor a SIGTERM to `zoo plan` reaches them, and a worker would otherwise finish
    its compile (tens of seconds) before it noticed. A SIGTERM becomes SystemExit here
    (exit status 143), so the block's exit stops them."""
    def terminate(signum, _frame):
        raise SystemExit(128 + signum)

    main = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = signal.signal(signal.SIGTERM, terminate) if main else None
    try:
        yield
    finally:
        scheduler.stop_workers()
        if main:
            signal.signal(signal.SIGTERM, previous)


class Worker:
    """A search_worker process: candidates in on stdin, `RESULT` lines back on stdout."""

    def __init__(self, model: str, tpu: str):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.plan.search_worker", model, tpu],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.results: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith(MARK):
                self.results.put(json.loads(line[len(MARK):]))
        self.results.put(None)  # the process ended

    def compile(self, overrides: tuple[str, ...], limit_s: float) -> dict | None:
        """The worker's answer; None when `limit_s` passed first (the worker is stopped)."""
        self.process.stdin.write(json.dumps(list(overrides)) + "\n")
        self.process.stdin.flush()
        try:
            answer = self.results.get(timeout=max(limit_s, 0.0))
        except queue.Empty:
            self.stop()
            return None
        if answer is None:
            code = self.process.wait()
            raise RuntimeError(
                "the compile process was killed (SIGKILL: out of host memory, most likely; "
                "fewer --jobs or a larger machine)" if code == -9 else
                f"the compile process ended ({code}): {self._last_log_line()}")
        return answer

    def _last_log_line(self) -> str:
        self.log.seek(0)
        lines = [line.strip() for line in self.log if line.strip()]
        return lines[-1] if lines else "no message"

    def stop(self) -> None:
        """Kill the worker and its children (its process group); any number of times."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log.close()


class Scheduler:
    """Hands candidates to worker threads in compile order, skipping what the finished
    compiles rule out and holding back what an unfinished one may rule out. With jobs
    unset, the first compile runs alone; its peak host memory then sets how many run at
    once (cores and free memory allowing)."""

    def __init__(self, space: Space, jobs: int | None, deadline: float | None):
        self.space, self.jobs, self.deadline = space, jobs, deadline
        self.pending = list(space.candidates)
        self.in_flight: list[Candidate] = []
        self.outcomes: list[Outcome] = []
        self.ruled_out = self.below_floor = 0
        self.allowed = jobs or 1
        self.changed = threading.Condition()
        self.workers: set[Worker] = set()  # running, for stop_workers
        self.stopping = False
        self.bar = tqdm(total=len(self.pending), desc="compiling", unit="config",
                        file=sys.stderr, dynamic_ncols=True)

    def run(self, model: str, tpu: str) -> None:
        slots = self.jobs or max(1, os.cpu_count() or 1)
        threads = [threading.Thread(target=self._slot, args=(i, model, tpu), daemon=True)
                   for i in range(slots)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.bar.close()

    def stop_workers(self) -> None:
        """End every compile process now; no slot starts another."""
        with self.changed:
            self.stopping = True
            workers, self.workers = list(self.workers), set()
            self.changed.notify_all()
        for worker in workers:
            worker.stop()

    def _start_worker(self, model: str, tpu: str) -> Worker | None:
        with self.changed:
            if self.stopping:
                return None
            worker = Worker(model, tpu)
            self.workers.add(worker)
            return worker

    def _slot(self, index: int, model: str, tpu: str) -> None:
        worker = None
        try:
            while (candidate := self._next(index)) is not None:
                worker = worker or self._start_worker(model, tpu)
                if worker is None:
                    return
                started = time.monotonic()
                try:
                    answer = worker.compile((*self.space.planner.overrides,
                                             *candidate.overrides), self._limit())
                except RuntimeError as error:
                    worker.stop()
                    worker, answer = None, {"error": str(error)}
                if answer is None:  # it ran past its time: the worker was stopped
                    worker = None
                elif _holds_too_much(answer):
                    worker.stop()
                    worker = None
                self._finish(candidate, answer, time.monotonic() - started)
        finally:
            if worker:
                worker.stop()

    def _limit(self) -> float:
        if self.deadline is None:
            return COMPILE_LIMIT_S
        return min(COMPILE_LIMIT_S, self.deadline - time.monotonic())

    def _next(self, index: int) -> Candidate | None:
        """The best pending candidate no unfinished compile may rule out (nor a pending one
        that would make it pointless by fitting); waits while there is none, or while this
        slot is beyond the allowed count."""
        with self.changed:
            while True:
                if self.stopping or (self.deadline is not None
                                     and time.monotonic() >= self.deadline):
                    return None
                self._drop_ruled_out()
                if not self.pending and not self.in_flight:
                    return None
                if index < self.allowed:
                    free = [c for c in self.pending if not any(
                        f.dominates(c) or f.refusal_implies(c) for f in self.in_flight)
                        and not any(p.dominates(c) for p in self.pending)]
                    if free:
                        self.pending.remove(free[0])
                        self.in_flight.append(free[0])
                        return free[0]
                settled = self.jobs is not None or bool(self.outcomes)
                if settled and index >= self.allowed:
                    return None
                self.changed.wait(timeout=5)

    def _drop_ruled_out(self) -> None:
        """Drop what a finished compile rules out, and what is estimated below the floor of
        the best-estimated candidate that fits (not of the best estimate: the compiler may
        refuse that one)."""
        done = self.outcomes
        keep = [c for c in self.pending if not any(
            (o.status == "fits" and o.candidate.dominates(c))
            or (o.status == "refused" and o.candidate.refusal_implies(c)) for o in done)]
        self.ruled_out += len(self.pending) - len(keep)
        floor = ESTIMATE_FLOOR * max((o.candidate.items_per_second_per_chip for o in done
                                      if o.status == "fits"), default=0.0)
        worth = [c for c in keep if c.items_per_second_per_chip >= floor]
        self.below_floor += len(keep) - len(worth)
        self.bar.update(len(self.pending) - len(worth))
        self.pending = worth

    def _finish(self, candidate: Candidate, answer: dict | None, seconds: float) -> None:
        if answer is None:
            outcome = Outcome(candidate, "timed out", seconds,
                              detail=f"stopped after {seconds:.0f} s")
        elif "error" in answer:
            outcome = Outcome(candidate, "error", seconds, detail=answer["error"])
        else:
            outcome = Outcome(candidate, "fits" if answer["fits"] else "refused", seconds,
                              answer["record"])
        with self.changed:
            self.in_flight.remove(candidate)
            self.outcomes.append(outcome)
            if self.jobs is None and "peak_host_bytes" in (answer or {}):
                self._allow_by_memory(answer["peak_host_bytes"])
            self._bisect(outcome)
            self.bar.update(1)
            best = max((o.mfu for o in self.outcomes if o.status == "fits"), default=None)
            if best is not None:
                self.bar.set_postfix_str(f"best projected MFU {best:.1%}")
            self.changed.notify_all()

    def _allow_by_memory(self, peak: int) -> None:
        """As many workers as cores, and free host memory at the first compile's peak."""
        free = runtime.host_memory_available() or peak
        self.allowed = max(self.allowed, min(os.cpu_count() or 1,
                                             1 + int(free // (peak * MEMORY_MARGIN))))

    def _bisect(self, outcome: Outcome) -> None:
        """Between the largest fitting and the smallest refused batch of one layout and
        remat, queue the batch halfway: the largest that fits is found."""
        mine = outcome.candidate
        same = [o for o in self.outcomes if o.candidate.group == mine.group
                and o.candidate.remat == mine.remat and o.status in ("fits", "refused")]
        fitting = [o.candidate.batch_per_device for o in same if o.status == "fits"]
        refused = [o.candidate.batch_per_device for o in same if o.status == "refused"]
        if not fitting or not refused or min(refused) - max(fitting) < 2:
            return
        middle = self.space.planner.with_batch(mine, (max(fitting) + min(refused)) // 2)
        known = {c.overrides for c in [*self.pending, *self.in_flight]}
        if middle is None or middle.overrides in known | {o.candidate.overrides
                                                          for o in self.outcomes}:
            return
        self.pending.append(middle)
        self.pending.sort(key=compile_order)
        self.bar.total += 1


def _holds_too_much(answer: dict) -> bool:
    """A worker whose peak host memory passed RECYCLE_SHARE of the machine is replaced
    after its compile: a process keeps what it grew to, and the next compile adds to it
    (llama-8b on v5p-128: 19 GB after one compile, killed for memory during a later one)."""
    return answer.get("peak_host_bytes", 0) > RECYCLE_SHARE * psutil.virtual_memory().total


def describe(result: SearchResult) -> str:
    """The ranked table, what was pruned, and the winner's `zoo train` line."""
    space = result.space
    rows = []
    for rank, outcome in enumerate(result.ranked, 1):
        row = outcome.row()
        rows.append((str(rank), outcome.candidate.sharding, _mesh_text(outcome.candidate),
                     outcome.candidate.remat, str(outcome.candidate.batch_per_device),
                     format_bytes(outcome.hbm_bytes), f"{row['step_seconds'] * 1e3:,.1f}",
                     f"{row['items_per_second_per_chip']:,.0f}", f"{row['mfu']:.1%}",
                     f"{outcome.seconds:.0f}"))
    for outcome in result.outcomes:
        if outcome.status != "fits":
            candidate = outcome.candidate
            rows.append(("-", candidate.sharding, _mesh_text(candidate), candidate.remat,
                         str(candidate.batch_per_device),
                         format_bytes(outcome.hbm_bytes) if outcome.hbm_bytes else "-",
                         outcome.status, "-", "-", f"{outcome.seconds:.0f}"))
    header = ("rank", "sharding", "mesh", "remat", "batch/device", "HBM/chip",
              "step ms", f"{result.item}/s/chip", "MFU", "compile s")
    winner = result.winner
    return "\n".join([
        f"searched {space.considered} configurations of {result.model} on {result.tpu} in "
        f"{result.seconds:.0f} s ({result.jobs} compile process(es)): "
        f"{len(space.invalid)} refused by zoo train's checks, {space.unfit} above HBM "
        f"(analytic), {result.below_floor} estimated below {ESTIMATE_FLOOR:.0%} of the best "
        "that fits, "
        f"{result.ruled_out} ruled out by compiled ones, {len(result.outcomes)} compiled",
        format_table(header, rows),
        *(f"  {outcome.status}: {' '.join(outcome.candidate.overrides)}: {outcome.detail}"
          for outcome in result.outcomes if outcome.status == "error"),
        "step ms and MFU: the step model's projection of the compiled program, communication "
        "exposed, loop bodies' HBM bytes counted every trip (a model, not a measurement); "
        "HBM: the compiler's total",
        f"winner: {winner.mfu:.1%} projected MFU, "
        f"{winner.items_per_second_per_chip:,.0f} {result.item}/s/chip",
        f"  {result.train_command()}",
    ])


def _mesh_text(candidate: Candidate) -> str:
    return " ".join(f"{axis}={size}" for axis, size in candidate.mesh if size > 1) or "1"
