"""Where step metrics go: a progress bar, RUN/metrics.jsonl, TensorBoard scalars in RUN/tb,
and wandb when configured.
On a slice only the main host writes them (one voice); the others stay quiet.

Values arrive from step closures, i.e. after the step graph ran, so reading them never
forces an extra execution or breaks the graph.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from pathlib import Path

from tqdm import tqdm

from zoo.core.run_folder import RunFolder


@dataclasses.dataclass
class WandbConfig:
    project: str | None = None  # set to log to wandb
    mode: str = "auto"  # auto: online with WANDB_API_KEY, else offline; or online/offline/disabled
    run_name: str | None = None


class MetricsLogger:
    def __init__(
        self,
        run_dir: Path,
        total_steps: int,
        start_step: int,
        wandb: WandbConfig,
        config: dict,
        unit: str = "tokens",
        main_host: bool = True,
    ):
        self.unit = unit
        self.path = RunFolder(Path(run_dir)).metrics
        self.file = self.wandb_run = self.tensorboard = None
        if main_host:
            _drop_records_after(self.path, start_step)  # a resumed run rewrites those steps
            self.file = self.path.open("a")
            self.wandb_run = start_wandb(wandb, run_dir, config)
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(str(RunFolder(Path(run_dir)).tensorboard),
                                             purge_step=start_step + 1)
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

    def note(self, text: str) -> None:
        self.bar.write(text)

    def close(self) -> None:
        self.bar.close()
        if self.file is not None:
            self.file.close()
            self.tensorboard.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def _drop_records_after(path: Path, step: int) -> None:
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(kept))
    tmp.replace(path)


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def start_wandb(config: WandbConfig, run_dir: Path, run_config: dict):
    """The run's one W&B run: its id is kept in the run folder, so a restart (after
    preemption) and `zoo eval` continue it instead of starting new ones."""
    if not config.project or config.mode == "disabled":
        return None
    import wandb

    id_file = RunFolder(Path(run_dir)).wandb_id
    if not id_file.exists():
        id_file.write_text(uuid.uuid4().hex[:12] + "\n")  # W&B ids: [a-z0-9]
    identity = {"id": id_file.read_text().strip(), "resume": "allow"}

    mode = config.mode
    if mode == "auto":
        mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"

    def init(mode: str):
        return wandb.init(
            project=config.project,
            name=config.run_name,
            dir=str(run_dir),
            config=run_config,
            mode=mode,
            settings=wandb.Settings(init_timeout=30, silent=True),
            **identity,
        )

    try:
        return init(mode)
    except Exception:  # no network or a bad key: keep the run, log offline instead
        if mode == "offline":
            raise
        return init("offline")
