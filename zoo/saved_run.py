"""Finding things in run folders (layout: core/run_folder.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from zoo.core.checkpoint import complete_steps
from zoo.core.errors import UserError
from zoo.core.run_folder import RunFolder, step_of


def checkpoint_step(path: Path) -> int:
    """The step of a checkpoint folder, or of the newest complete checkpoint of a run."""
    step = step_of(path.name)
    if step is not None:
        return step
    steps = complete_steps(RunFolder(path).checkpoints)
    if not steps:
        raise UserError(f"run {path} has no complete checkpoint yet")
    return steps[-1]


def load_run(path: str | Path):
    """(family, resolved run config, run folder) for a run or checkpoint folder."""
    from zoo.compose import load_run_config

    run = RunFolder.containing(path)
    saved = yaml.safe_load(run.config.read_text())
    family, cfg = load_run_config(saved["model_name"], [], [run.config])
    return family, cfg, run.path
