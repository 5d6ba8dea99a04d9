"""Benchmark suites: YAML lists of entries (model, presets, batch, sequence, topology). An
entry with `max_new_tokens` measures generation (benchmarks/generation.py) instead of a
training step: `global_batch_size` prompts of `seq_len` tokens each."""

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
    # A generation entry: new tokens a prompt (at least 2: the first comes from the prefill)
    max_new_tokens: int | None = None

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


REQUIRED = {"name": "tiny-fsdp-1dev", "model": "llama-tiny"}  # no default: an example


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
    if not raws:
        raise UserError(f"benchmark suite {path} has no entries; add some such as "
                        "`- {name: tiny, model: llama-tiny}` (see benchmarks/suites/*.yaml)")
    for index, raw in enumerate(raws, 1):
        _check_entry(raw, f"{path}: entry {index} ({raw.get('name', 'unnamed')})", fields)
    return [Entry(**raw) for raw in raws]


def _check_entry(raw: dict, where: str, fields: set[str]) -> None:
    """Refuse, while the suite is read, an entry the harness would fail on mid-suite."""
    unknown = set(raw) - fields
    if unknown:
        raise UserError(f"{where} has unknown keys {sorted(unknown)}; "
                        f"valid: {', '.join(sorted(fields))}")
    for key, example in REQUIRED.items():
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise UserError(f"{where} needs a `{key}:`, e.g. {key}: {example}")
    for key, least in (("global_batch_size", 1), ("seq_len", 1), ("max_new_tokens", 2)):
        value = raw.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < least):
            raise UserError(f"{where}: {key} must be a whole number >= {least}, not {value!r}")
    if raw.get("max_new_tokens") is not None and raw.get("seq_len") is None:
        raise UserError(f"{where}: a generation entry (max_new_tokens) needs `seq_len:`, "
                        "each prompt's length")
    for key in ("overrides", "maxtext"):
        if not isinstance(raw.get(key, []), list):
            raise UserError(f"{where}: {key} must be a list of key=value strings")
