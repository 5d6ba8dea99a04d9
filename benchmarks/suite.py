"""Benchmark suites: YAML lists of entries (model, presets, batch, sequence, topology)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from core.errors import UserError

SUITES_DIR = Path(__file__).resolve().parent / "suites"


@dataclasses.dataclass
class Entry:
    name: str
    model: str
    tpu: str = "cpu-1"
    sharding: str = "fsdp"
    remat: str = "none"
    global_batch_size: int = 8
    seq_len: int | None = None  # LM entries; other families set their shapes in overrides
    overrides: list[str] = dataclasses.field(default_factory=list)
    # Extra MaxText config keys for `--compare maxtext` (e.g. remat_policy=minimal).
    maxtext: list[str] = dataclasses.field(default_factory=list)

    def train_overrides(self) -> list[str]:
        """The `zoo train` config for this entry, on synthetic data."""
        return [
            f"tpu={self.tpu}",
            f"sharding={self.sharding}",
            f"remat={self.remat}",
            f"global_batch_size={self.global_batch_size}",
            *([f"seq_len={self.seq_len}"] if self.seq_len else []),
            "data.source=synthetic",
            *self.overrides,
        ]

    def run(self, *extra: str):
        """The entry's run, resolved (zoo/app/run.py), with `extra` overrides."""
        from zoo.app.run import resolve_run  # start-up

        return resolve_run(self.model, [*self.train_overrides(), *extra])


def load_suite(name_or_path: str) -> list[Entry]:
    path = Path(name_or_path)
    if not path.is_file():
        path = SUITES_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))
        raise UserError(
            f"no benchmark suite '{name_or_path}'; suites: {', '.join(names)} "
            "(or a path to a YAML file)"
        )
    fields = {f.name for f in dataclasses.fields(Entry)}
    try:
        raws = yaml.safe_load(path.read_text()) or []
    except yaml.YAMLError as error:
        raise UserError(f"benchmark suite {path} is not valid YAML: {error.problem}") from None
    if not isinstance(raws, list) or not all(isinstance(raw, dict) for raw in raws):
        raise UserError(f"benchmark suite {path} must be a list of entries "
                        "(see benchmarks/suites/default.yaml)")
    entries = []
    for raw in raws:
        unknown = set(raw) - fields
        if unknown:
            raise UserError(
                f"{path}: entry {raw.get('name', '?')} has unknown keys "
                f"{sorted(unknown)}; valid: {', '.join(sorted(fields))}"
            )
        entries.append(Entry(**raw))
    return entries
