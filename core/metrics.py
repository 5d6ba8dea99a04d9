"""Where step metrics go: a progress bar, RUN/metrics.jsonl, TensorBoard scalars in RUN/tb,
and wandb when configured.
On a slice only the main host writes them (one voice); the others stay quiet. A run folder
in a bucket gets them as they are logged (core/store/run_home.py).

Values arrive from step closures, i.e. after the step graph ran, so reading them never
forces an extra execution or breaks the graph.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import uuid
from pathlib import Path

from tqdm import tqdm

from core.store.run_folder import RunFolder
from core.store.run_home import RunHome


@dataclasses.dataclass
class WandbConfig:
    project: str | None = None  # set to log to wandb
    mode: str = "auto"  # auto: online with WANDB_API_KEY, else offline; or online/offline/disabled
    run_name: str | None = None


class MetricsLogger:
    def __init__(
        self,
        home: RunHome,
        total_steps: int,
        start_step: int,
        wandb: WandbConfig,
        config: dict,
        unit: str = "tokens",
        main_host: bool = True,
        notes: bool = True,
    ):
        self.unit, self.home = unit, home
        self.notes = notes
        run = RunFolder(home.local)
        self.file = self.wandb_run = self.tensorboard = None
        if main_host:
            _drop_records_after(run.metrics, start_step)  # a resumed run rewrites those steps
            self.file = run.metrics.open("a")
            self.wandb_run = start_wandb(wandb, home.local, config)
            from torch.utils.tensorboard import SummaryWriter  # tensorboard

            self.tensorboard = SummaryWriter(str(run.tensorboard), purge_step=start_step + 1)
        self.bar = tqdm(
            total=total_steps, initial=start_step, desc="train", unit="step",
            dynamic_ncols=True, disable=not main_host,
        )

    def step_done(self, metrics: dict) -> None:
        """Every step: advance the bar and show the latest numbers."""
        self.bar.update(1)
        shown = {"loss": f"{metrics['loss']:.3f}"}
        if metrics["mfu"] is not None:  # not while the timing window fills
            shown |= {f"{self.unit}/s": f"{metrics[f'{self.unit}_per_s']:.0f}",
                      "mfu": f"{metrics['mfu']:.1%}"}
        self.bar.set_postfix(shown, refresh=False)

    def record(self, metrics: dict) -> None:
        """Logged steps: one JSON line, a console line, and wandb (main host only)."""
        if self.file is None:
            return
        self.file.write(json.dumps(metrics) + "\n")
        self.file.flush()
        shown = " ".join(f"{k}={_fmt(v)}" for k, v in metrics.items()
                         if k != "step" and v is not None)
        self.bar.write(f"step {metrics['step']}: {shown}")
        for key, value in metrics.items():
            if key != "step" and isinstance(value, int | float):
                self.tensorboard.add_scalar(key, value, metrics["step"])
        self.tensorboard.flush()
        if self.wandb_run is not None:
            self.wandb_run.log(metrics, step=metrics["step"])
        self.home.push(throttled=True)

    def note(self, text: str) -> None:
        """Every host says it (each host's log is its own), unless `notes` is off."""
        if self.notes:
            self.bar.write(text)

    def close(self) -> None:
        self.bar.close()
        if self.file is not None:
            self.file.close()
            self.tensorboard.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
        if self.file is not None:
            self.home.push()


def _drop_records_after(path: Path, step: int) -> None:
    """Keep the records up to `step`; a damaged line (a write cut short by a kill) is dropped
    with a warning rather than ending the run."""
    if not path.exists():
        return
    kept, damaged = [], 0
    for line in path.read_text(errors="replace").splitlines():
        record = _record(line)
        if record is None:
            damaged += bool(line.strip())
        elif record["step"] <= step:
            kept.append(line + "\n")
    if damaged:
        print(f"warning: {path}: dropped {damaged} damaged line{'s' * (damaged > 1)}",
              file=sys.stderr)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(kept))
    tmp.replace(path)


def _record(line: str) -> dict | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("step"), int) else None


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def wandb_run_id(id_file: Path) -> str:
    """The run's W&B id, made on first use; a damaged one is replaced, with a warning."""
    saved = id_file.read_text().strip() if id_file.exists() else None
    if saved is None or not re.fullmatch(r"[a-z0-9]+", saved):
        if saved is not None:
            print(f"warning: {id_file} is damaged ({saved[:20]!r}); logging to a new W&B run",
                  file=sys.stderr)
        saved = uuid.uuid4().hex[:12]  # W&B ids: [a-z0-9]
        id_file.write_text(saved + "\n")
    return saved


def start_wandb(config: WandbConfig, run_dir: Path, run_config: dict):
    """The run's one W&B run: its id is kept in the run folder, so a restart (after
    preemption) and `zoo eval` continue it instead of starting new ones. A logger never
    stops a run: W&B that cannot start online logs offline, and one that cannot start at
    all is a warning (metrics.jsonl and TensorBoard still have every step)."""
    mode = config.mode
    if mode == "auto":  # the user's own WANDB_MODE wins; else online when a key is set
        mode = os.environ.get("WANDB_MODE") or (
            "online" if os.environ.get("WANDB_API_KEY") else "offline")
    if not config.project or mode == "disabled":
        return None
    import wandb  # wandb

    identity = {"id": wandb_run_id(RunFolder(Path(run_dir)).wandb_id), "resume": "allow"}
    failure = None
    for attempt in dict.fromkeys((mode, "offline")):  # no network or a bad key: offline
        try:
            return wandb.init(project=config.project, name=config.run_name, dir=str(run_dir),
                              config=run_config, mode=attempt,
                              settings=wandb.Settings(init_timeout=30, silent=True),
                              **identity)
        except Exception as error:  # wandb raises its own kinds, and network errors
            failure = error
            with contextlib.suppress(Exception):  # a half-started run holds the run's id
                wandb.finish()
    print(f"warning: W&B logging is off for this run ({type(failure).__name__}: "
          f"{str(failure).splitlines()[0] if str(failure) else 'no message'}); every step is "
          f"still in {RunFolder(Path(run_dir)).metrics} and TensorBoard", file=sys.stderr)
    return None
