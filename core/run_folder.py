"""The layout of a run folder, spelled in one place:

    RUN/config.yaml                 the resolved run config
    RUN/metrics.jsonl               one record per logged step
    RUN/checkpoints/step-NNNNNNNN/  resumable checkpoints (core/checkpoint.py)
    RUN/hf/step-NNNNNNNN/           Hugging Face exports of those checkpoints
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from zoo.core.errors import UserError

_STEP_DIR = re.compile(r"step-(\d+)")


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def step_of(folder_name: str) -> int | None:
    """The step a `step-N` folder name stands for; None for any other name."""
    found = _STEP_DIR.fullmatch(folder_name)
    return int(found.group(1)) if found else None


@dataclasses.dataclass(frozen=True)
class RunFolder:
    path: Path

    @classmethod
    def containing(cls, path: str | Path) -> RunFolder:
        """The run folder `path` is, or holds as one of its checkpoints (RUN/checkpoints/step-N)."""
        path = Path(path)
        for candidate in (cls(path), cls(path.parent.parent)):
            if candidate.config.is_file():
                return candidate
        raise UserError(f"{path} is neither a run folder nor a checkpoint in one (no config.yaml)")

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def export(self, step: int) -> Path:
        return self.path / "hf" / step_dir_name(step)
