"""The one training loop: a model, a task (core/task.py: data, loss, items), sharding
rules and a remat policy, composed on a backend. The loop drives the train step
(core/step.py) and does the I/O around it: data, logging, checkpoints, resumption,
SIGTERM. No subclass per task; every task-specific hook is a call on the task object,
documented there."""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import signal
import time

import torch

from core import backends, goodput
from core import hosts as hosts_lib
from core.metrics import MetricsLogger
from core.nan_guard import NonFiniteStep, describe_non_finite, weights_finite
from core.remat import RematConfig, apply_remat
from core.run_config import TrainConfig
from core.sharding import ShardingRules
from core.step import TrainStep
from core.store.checkpoint import Checkpointer
from core.store.run_home import RunHome
from core.task import Task
from core.topology import Topology

WARMUP_STEPS = 2  # step 1 compiles the step (step 2 too for optimizers with lazy state)
TIMING_WINDOW = 10  # steps averaged into the reported step time
MIN_TIMED_STEPS = 3  # fewer after the warm-up give no step time, throughput or MFU


class Engine:
    def __init__(
        self,
        config: TrainConfig,
        model: torch.nn.Module,
        task: Task,
        rules: ShardingRules,
        remat: RematConfig,
        topology: Topology,
        *,
        train_flops_per_item: float,
        backend=None,
    ):
        self.config, self.task, self.topology = config, task, topology
        self.backend = backend or backends.get("xla")
        self.home = RunHome(config.out)  # the run folder, maybe in a bucket
        self.run_dir = self.home.local
        self.devices = self.backend.device_count()
        self.bf16 = config.runs_in_bf16(self.topology)
        self.backend.check_remat(remat)

        def place(module: torch.nn.Module) -> tuple:
            """`module` on the devices as the run places its model (remat, sharding,
            precision), with the parameter plan, the mesh and its axis sizes."""
            apply_remat(module, remat)
            return self.backend.prepare(module, rules, config.mesh, self.bf16)

        # before the model is placed: what a task needs beside it may start as its copy
        task = self.task = task.bind(model, config, lambda module: place(module)[0])
        model, self.plan, self.mesh, self.mesh_sizes = place(model)
        self.train_flops_per_item = train_flops_per_item  # what MFU counts
        # torch_xla's micro-batch loop (gradient_accumulation) computes a wrong loss around
        # its scan and refuses its checkpoint (tests/e2e/test_train.py): unrolled there
        in_loop = False if remat.scan or remat.checkpoint else None
        self.train_step = TrainStep.around(model, config, task, self.backend, self.bf16,
                                           accumulate_in_loop=in_loop)
        self.model, self.optimizer = model, self.train_step.optimizer
        self.scheduler = self.train_step.scheduler
        self.checkpointer = Checkpointer(config.checkpoint_location,
                                         keep=config.keep_checkpoints,
                                         consolidate=config.consolidate_checkpoints,
                                         async_save=config.async_checkpoints,
                                         backend=self.backend)
        self.data = task.data(config, self.backend.process_index(),
                              self.backend.process_count())
        self.step = 0
        self.side_compiles = 0
        self._stop_requested = False
        self.peak_flops = float("nan")  # the runtime's peak FLOP/s, known once `fit` starts
        task.started(self)

    @property
    def unit(self) -> str:
        return self.task.unit

    def items_per_step(self) -> int:
        return self.task.items_per_step(self.config)

    def flops_per_step(self) -> float:
        return self.train_flops_per_item * self.items_per_step()

    # ---- the loop ----------------------------------------------------------------------
    def fit(self) -> dict:
        """Train to `config.steps`, resuming from the latest complete checkpoint."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        start = self.step = self._resume()
        peak, peak_note = self._peak_flops()
        self.peak_flops = peak
        logger = MetricsLogger(
            self.home,
            self.config.steps,
            start,
            self.config.wandb,
            dataclasses.asdict(self.config),
            unit=self.unit,
            main_host=self.hosts.main,
            notes=self.hosts.main or not self.backend.one_console,
        )
        logger.note(
            f"mesh {self.mesh_sizes} on {self.devices} devices"
            f"{_over_slices(self.config.mesh.dcn)}; "
            f"{'bf16' if self.bf16 else 'fp32'}; MFU against {peak_note}"
        )
        # a batch made from the model (a rollout) may compile graphs: not the step's
        example = self._aside(lambda: self.data.batch(start))
        self._tracker = _StepTracker(self, logger, peak)
        profiler = self.backend.profiler(self.config.profile, self.run_dir)
        batches = iter(self.backend.loader(self.host_batches(start), self.mesh, example,
                                           prefetch=not getattr(self.data, "on_demand", False)))
        previous = signal.signal(signal.SIGTERM, self._request_stop)
        self.goodput.loop_starts()
        try:
            self._loop(start, batches, profiler, logger)
        except NonFiniteStep as error:
            self.checkpointer.wait()  # a save of an earlier, good step commits
            latest = self.checkpointer.latest_step()
            kept = (f"the last checkpoint, step {latest}, is kept" if latest
                    else "no checkpoint was written")
            raise NonFiniteStep(f"{error}; training stopped before saving it ({kept}); "
                                "lower optim.lr, or set nan_policy=skip to skip such "
                                "steps") from None
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.goodput.close()  # before the logger's last push: a bucket gets it too
            logger.close()
        summary = self._tracker.summary()  # empty when there was no step left to run
        if summary and self.hosts.main:
            summary["goodput"] = goodput.account(goodput.read_attempts(self.goodput.file))
        return summary

    def _loop(self, start: int, batches, profiler, logger) -> None:
        """Steps start+1 .. config.steps, each logged, checkpointed when due; a SIGTERM on
        any host saves the step and ends it."""
        account = self.goodput
        for step in range(start + 1, self.config.steps + 1):
            profiler.step_starts(step)
            with profiler.region("data"), account.timing("data_loading"):
                batch = self._aside(lambda: next(batches))
            compiles, began = self._compile_count(), time.monotonic()
            with profiler.region("step"):
                values = self.train_step(batch)
                lr = self.scheduler.get_last_lr()[0]
                self.backend.after_step(self._tracker.done, (step, values, lr, batch))
            before = self._compile_count()  # also what the task's work below compiles from
            account.add("program_startup" if before > compiles else "productive",
                        time.monotonic() - began)
            self.step = step
            account.step_done(step)
            with account.timing("evaluation"):
                extra = self.task.after_step(self, self.step)
            self.side_compiles += self._compile_count() - before
            if extra:
                logger.record({"step": self.step, **extra})
            stop = self.hosts.any(self._stop_requested)  # SIGTERM on any host stops all
            last = stop or self.step == self.config.steps
            if last or self.step % self.config.checkpoint_every == 0:
                with profiler.region("checkpoint"), account.timing(
                        "unproductive_checkpoint_save_time"):
                    self._save(wait=last)
                account.checkpointed(self.step)
            if note := profiler.step_ended(step, last):
                logger.note(note)
            if stop:
                logger.note(f"SIGTERM: saved step {self.step}, exiting; rerun to resume")
                break

    def host_batches(self, start: int):
        """This host's batches from global batch `start` on (resume: start = step)."""
        index = start
        while True:
            yield self.data.batch(index)
            index += 1

    @functools.cached_property
    def goodput(self) -> goodput.Attempt:
        """This process's account of the run's wall time (core/goodput.py), written by the
        main host; made on first use (a resume or the loop)."""
        return goodput.Attempt(self.run_dir, write=self.hosts.main)

    @functools.cached_property
    def hosts(self) -> hosts_lib.Hosts:
        """The slice's hosts, joined on first use (a gloo group when there are several)."""
        return hosts_lib.current()

    def _request_stop(self, signum, frame):
        self._stop_requested = True

    def _resume(self) -> int:
        step = self.checkpointer.resume_step()  # one step for all hosts
        if step is None:
            return 0
        before = self._compile_count()  # restoring compiles small graphs: not the step's
        with self.goodput.timing("unproductive_checkpoint_restore_time"):
            state = self.checkpointer.restore(self.model, self.optimizer, self.scheduler,
                                              step=step)
        self.side_compiles += self._compile_count() - before
        if self.hosts.main:
            print(f"resuming from step {state['step']} ({self.checkpointer.directory})")
        self.goodput.resumed(state["step"])
        return state["data_position"]

    def _save(self, wait: bool) -> None:
        """Checkpoint this step; `wait` until it is committed (the run's last save)."""
        # Gathering sharded tensors for the weights file compiles small graphs of its own;
        # keep them (like evaluation graphs) out of the step's compile count.
        before = self._compile_count()
        if not weights_finite(self.model):
            raise NonFiniteStep(f"step {self.step}: the weights are not finite")
        self.checkpointer.save(self.step, self.model, self.optimizer, self.scheduler,
                               data_position=self.step)
        self.side_compiles += self._compile_count() - before
        if self.hosts.main:  # a run in a bucket: its metrics so far go with the checkpoint
            self.home.push()
        if wait:
            self.checkpointer.wait()

    def _compile_count(self) -> int:
        return self.backend.compile_stats()[0]

    def _aside(self, work):
        """`work()`, the graphs it compiles counted apart from the train step's."""
        before = self._compile_count()
        try:
            return work()
        finally:
            self.side_compiles += self._compile_count() - before

    def autocast(self):
        """The run's precision, for the tasks' evaluation passes as for the step."""
        return self.train_step.autocast()

    def _peak_flops(self) -> tuple[float, str]:
        """Peak FLOP/s of the whole runtime, and how it was obtained."""
        if self.topology.is_tpu:
            return self.topology.peak_bf16_flops, self.topology.peak_description
        dtype = "bfloat16" if self.bf16 else "float32"
        before = self._compile_count()
        peak = self.backend.peak_flops(dtype, self.devices)
        self.side_compiles += self._compile_count() - before  # not the step's
        return peak


def _over_slices(dcn: dict[str, int]) -> str:
    """`, 2 slices (data across them over DCN)` for a multi-slice mesh; '' for one slice."""
    slices = math.prod(dcn.values())
    if slices == 1:
        return ""
    return f", {slices} slices ({', '.join(f'{a} x{n}' for a, n in dcn.items())} over DCN)"


class _StepTracker:
    """Turns materialised step values into metrics; spots recompilation after warm-up."""

    def __init__(self, engine: Engine, logger: MetricsLogger, peak_flops: float):
        self.engine, self.logger, self.peak = engine, logger, peak_flops
        self.start_step = engine.step
        self.times = collections.deque([time.perf_counter()], maxlen=TIMING_WINDOW + 1)
        self.signature = None
        self.compiles = engine._compile_count() - engine.side_compiles
        self.compile_seconds = engine.backend.compile_stats()[1]
        self.step_compile_seconds: list[float] = []  # each compile of the train step
        self.history: list[dict] = []

    def done(self, step: int, values: dict, lr: float, batch: dict) -> None:
        values = {k: float(v) for k, v in values.items()}
        if bad := describe_non_finite({k: values[k] for k in ("loss", "grad_norm")}):
            if self.engine.config.nan_policy == "stop":
                raise NonFiniteStep(f"step {step}: {bad}")
            self.logger.note(f"step {step}: {bad}; step skipped (nan_policy=skip)")
        # Closures can run in bursts (async execution), so time a window of recent steps,
        # and only once it holds enough of them.
        self.times.append(time.perf_counter())
        timed = len(self.times) - 1
        step_time = (self.times[-1] - self.times[0]) / timed if timed >= MIN_TIMED_STEPS else None
        compiles = self.engine._compile_count() - self.engine.side_compiles
        signature = {k: (tuple(v.shape), str(v.dtype)) for k, v in batch.items()}
        if step > self.start_step + WARMUP_STEPS and compiles > self.compiles:
            self.logger.note(
                f"warning: step {step} recompiled the graph "
                f"({compiles - self.compiles} new compile(s)); "
                f"{_what_changed(self.signature, signature)}"
            )
        seconds = self.engine.backend.compile_stats()[1]
        if compiles > self.compiles:  # the train step compiled: say how long it took
            self.step_compile_seconds.append(seconds - self.compile_seconds)
            self.logger.note(f"step {step}: the train step compiled in "
                             f"{self.step_compile_seconds[-1]:.1f} s")
        self.compile_seconds = seconds
        if step <= self.start_step + WARMUP_STEPS:  # keep compile time out of the window
            self.times = collections.deque([self.times[-1]], maxlen=TIMING_WINDOW + 1)
        self.compiles, self.signature = compiles, signature
        engine = self.engine
        metrics = {"step": step, **values, "lr": lr, **self._speed(step_time),
                   "compiles": compiles}
        self.history.append(metrics)
        self.logger.step_done(metrics)
        cfg = engine.config
        if step % cfg.log_every == 0 or step == cfg.steps or step == self.start_step + 1:
            self.logger.record({**metrics, "goodput": engine.goodput.share()})

    def _speed(self, step_time: float | None) -> dict:
        """Step time, throughput and MFU; None until the timing window is long enough."""
        engine, unit = self.engine, self.engine.unit
        if step_time is None:
            return dict.fromkeys(("step_time_s", f"{unit}_per_s", f"{unit}_per_s_per_chip",
                                  "mfu"))
        rate = engine.items_per_step() / step_time
        return {
            "step_time_s": step_time,
            f"{unit}_per_s": rate,
            f"{unit}_per_s_per_chip": rate / engine.topology.per_chip(engine.devices),
            "mfu": engine.flops_per_step() / (step_time * self.peak),
        }

    def summary(self) -> dict:
        """The run's first and last loss, its compiles, and its median speed (None when no
        step was timed: a run shorter than the warm-up and the timing window)."""
        if not self.history:
            return {}
        timed = sorted(m["step_time_s"] for m in self.history if m["step_time_s"] is not None)
        median = timed[len(timed) // 2] if timed else None
        return {
            "first_step": self.history[0]["step"],
            "last_step": self.history[-1]["step"],
            "first_loss": self.history[0]["loss"],
            "last_loss": self.history[-1]["loss"],
            "median_step_time_s": median,
            "unit": self.engine.unit,
            "items_per_s": self._speed(median)[f"{self.engine.unit}_per_s"],
            "mfu": self._speed(median)["mfu"],
            "compiles": self.history[-1]["compiles"],
            "compile_s": self.step_compile_seconds,
        }


def _what_changed(before, after) -> str:
    if before is not None and before != after:
        changed = {k: (before.get(k), v) for k, v in after.items() if before.get(k) != v}
        return f"input shapes/dtypes changed: {changed}"
    return (
        "inputs unchanged, so the step graph itself changed (a Python value in the step?); "
        "rerun with PT_XLA_DEBUG_LEVEL=2 to see the cause"
    )
