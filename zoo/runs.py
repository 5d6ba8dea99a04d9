"""Finding things in run folders: RUN/config.yaml, RUN/checkpoints/step-N/."""

from __future__ import annotations

from pathlib import Path

import yaml

from core.checkpoint import complete_steps
from core.errors import UserError


def find_run_dir(path: Path) -> Path:
    """A run folder, or the run folder of a checkpoint folder inside RUN/checkpoints/."""
    for candidate in (path, path.parent.parent):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise UserError(f"{path} is neither a run folder nor a checkpoint in one (no config.yaml)")


def checkpoint_step(path: Path) -> int:
    """The step of a checkpoint folder, or of the newest complete checkpoint of a run."""
    if path.name.startswith("step-"):
        return int(path.name.split("-")[1])
    steps = complete_steps(path / "checkpoints")
    if not steps:
        raise UserError(f"run {path} has no complete checkpoint yet")
    return steps[-1]


def load_run(path: str | Path):
    """(family, resolved run config, run folder) for a run or checkpoint folder."""
    from zoo.train import load_run_config

    run_dir = find_run_dir(Path(path))
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    family, cfg = load_run_config(saved["model_name"], [], [run_dir / "config.yaml"])
    return family, cfg, run_dir
