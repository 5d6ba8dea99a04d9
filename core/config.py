"""One config system: typed dataclass schemas, YAML files, Hydra-style `a.b=value` overrides.

    cfg = load(TrainConfig, files=["run.yaml"], overrides=["mesh.tensor=2", "seed=3"])

Later sources win. An unknown key or a value of the wrong type fails with one line naming
the key and what would be valid. `write_resolved` stores the final config in a run folder,
`saved_text` is the text of every saved run config (ending with SAVED_CONFIG_END) and
`parse_saved` the one reader of it.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from pathlib import Path
from typing import TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from core.errors import UserError
from core.json_file import DamagedFile
from core.store.location import Store
from core.store.run_folder import LOCATION_CONFIG, RUN_CONFIG, RunFolder

T = TypeVar("T")
# the line a saved run config ends with: YAML cut between two keys is still valid YAML, so
# only a closing line written last tells a whole config from one cut short
SAVED_CONFIG_END = "# end of zoo run config"


class ConfigError(UserError):
    """A config key or value that the schema does not accept."""


def load(schema: type[T], files=(), overrides=()) -> T:
    """Merge schema defaults <- YAML files <- `key=value` overrides into a schema instance.
    A file is a path, or (name, tree) for a config read from elsewhere (a saved run's, as
    `parse_saved` read it)."""
    cfg = OmegaConf.structured(schema)
    for source in files:
        _merge(schema, cfg, _read_yaml(source), f"in {_name(source)}: ",
               "{key}: {{{leaf}: {value}}}")
    bad = [o for o in overrides if "=" not in o or o.startswith("=")]
    if bad:
        raise ConfigError(f"override '{bad[0]}' is not key=value (e.g. mesh.tensor=2)")
    _merge(schema, cfg, OmegaConf.from_dotlist(list(overrides)), "", "{key}.{leaf}={value}")
    try:
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as error:
        raise ConfigError(_one_line(schema, error)) from None
    except (TypeError, ValueError) as error:  # raised by a schema's __post_init__ checks
        raise ConfigError(str(error)) from None


def parse_yaml(text: str, name: str) -> dict:
    """A config's text as a dict; text that is not a YAML mapping fails in one line naming
    the file it came from."""
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise ConfigError(f"config file {name} is not valid YAML{where}: {problem}") from None
    if not isinstance(parsed, dict | None):
        raise ConfigError(f"config file {name} holds a {type(parsed).__name__}, not keys "
                          "and values")
    return parsed or {}


def _read_yaml(source) -> DictConfig:
    if isinstance(source, tuple):  # (name, a saved run's config as parse_saved read it)
        return OmegaConf.create(source[1])
    if not Path(source).is_file():
        raise ConfigError(f"config file {source} does not exist")
    return OmegaConf.create(parse_yaml(Path(source).read_text(), source))


def _name(source) -> str:
    return source[0] if isinstance(source, tuple) else str(source)


def sets_key(key: str, files=(), overrides=()) -> bool:
    """Whether the user gave top-level `key` (in a YAML file or an override), as opposed to
    the schema's default: some defaults are then raised to suit the slice."""
    given = any(o.partition("=")[0] == key for o in overrides)
    return given or any(key in _read_yaml(source) for source in files)


def given_value(key: str, files=(), overrides=()) -> str | None:
    """Top-level `key` as the user gave it (the last override, else the last file setting
    it), read before any schema: `task` picks the schema the rest is read with."""
    for override in reversed(overrides):
        name, _, value = override.partition("=")
        if name == key:
            return value
    for source in reversed(files):
        tree = _read_yaml(source)
        if key in tree:
            return str(tree[key])
    return None


def _merge(schema, cfg, other, where: str, spelling: str) -> None:
    """Merge `other` into `cfg`; `spelling` writes a section's key as this source would
    (for the hint when a value stands where a section belongs)."""
    _check_sections(schema, OmegaConf.to_container(other), "", where, spelling)
    try:
        cfg.merge_with(other)
    except OmegaConfBaseException as error:
        raise ConfigError(where + _one_line(schema, error)) from None


def _check_sections(schema, tree: dict, prefix: str, where: str, spelling: str) -> None:
    """A value where the schema has a section (`optim: 0.001`) fails naming the section and
    its keys; omegaconf's own error names no key."""
    hints = typing.get_type_hints(schema)
    for name, value in tree.items():
        section, key = hints.get(name), f"{prefix}{name}"
        if not dataclasses.is_dataclass(section):
            continue
        if isinstance(value, dict):
            _check_sections(section, value, f"{key}.", where, spelling)
            continue
        fields = typing.get_type_hints(section)  # the hint: the first key of the value's type
        leaf = next((field for field, kind in fields.items() if type(value) is kind), None)
        hint = f"; write {spelling.format(key=key, leaf=leaf, value=value)}" if leaf else ""
        raise ConfigError(f"{where}config key '{key}' is a section (keys "
                          f"{', '.join(fields)}), not a value{hint}")


def _one_line(schema, error: OmegaConfBaseException) -> str:
    key = getattr(error, "full_key", None) or "?"
    if isinstance(error, ConfigKeyError):
        parent, _, leaf = key.rpartition(".")
        valid = ", ".join(valid_keys(schema, parent)) or "none"
        where = f"under '{parent}'" if parent else "at the top level"
        return f"unknown config key '{key}'; valid keys {where}: {valid}"
    message = str(getattr(error, "msg", error)).splitlines()[0]
    return f"bad value for config key '{key}': {message}"


def valid_keys(schema, dotted_parent: str) -> list[str]:
    """Field names of the dataclass at `dotted_parent` inside `schema`."""
    node = schema
    for part in filter(None, dotted_parent.split(".")):
        hints = typing.get_type_hints(node) if dataclasses.is_dataclass(node) else {}
        node = hints.get(part)
    return [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []


def changed_keys(before: dict, after: dict) -> dict[str, tuple]:
    """{dotted key: (before, after)} for every leaf that differs between two config trees. A
    key `before` lacks is one added to zoo since it was saved: not a change."""
    flat_before, flat_after = _flatten(before), _flatten(after)
    return {k: (flat_before[k], flat_after.get(k)) for k in sorted(flat_before)
            if flat_before[k] != flat_after.get(k)}


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in (tree or {}).items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def same_named(source, names: tuple[str, ...]) -> dict:
    """{name: source.name} for the fields a config shares, by name, with its Hugging Face
    counterpart: one list serves both directions of a conversion."""
    return {name: getattr(source, name) for name in names}


def check_sizes(config, counts=(), positive=(), prefix: str = "model.") -> None:
    """For a config's __post_init__: refuse a count below 1 (a zero-width layer divides by
    zero or trains nothing; None is left alone) or a number that is not finite and > 0 (an
    epsilon or RoPE base of 0 or NaN trains to NaN)."""
    for name in counts:
        value = getattr(config, name)
        if value is not None and value < 1:
            raise ValueError(f"{prefix}{name} must be at least 1, not {value}")
    for name in positive:
        value = getattr(config, name)
        if not 0 < value < math.inf:
            raise ValueError(f"{prefix}{name} must be a finite number > 0, not {value}")


def to_yaml(cfg) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def saved_text(cfg) -> str:
    """A run config as zoo saves it (RUN/config.yaml, a checkpoint location's copy): its YAML,
    then SAVED_CONFIG_END last, which `parse_saved` requires."""
    return f"{to_yaml(cfg)}{SAVED_CONFIG_END}\n"


def parse_saved(text: str, name: str) -> dict:
    """A saved run config's text (from the file `name`) as a dict; DamagedFile when it does
    not end with SAVED_CONFIG_END (a file cut short between two keys parses as a shorter
    config, whose missing keys would silently take their defaults) or is not YAML keys."""
    lines = text.rstrip().splitlines()
    if not lines or lines[-1].strip() != SAVED_CONFIG_END:
        raise DamagedFile(f"{name} is damaged (cut short: it does not end with the line zoo "
                          f"writes last, '{SAVED_CONFIG_END}'); restore it from a copy, or, "
                          "if it is whole (written by hand or by an older zoo), add that line "
                          "at its end")
    try:
        return parse_yaml(text, name)
    except ConfigError as error:  # damaged, not a config to fix: a saved run's own file
        raise DamagedFile(str(error)) from None


def read_saved_config(path: str) -> tuple[tuple[str, dict], str | None]:
    """((the saved run config's file, its keys), the run folder when `path` is in one) of a
    run folder, a checkpoint location or a checkpoint in either; a config that is there but
    damaged (cut short too) is DamagedFile, none at all a UserError."""
    store = Store(path)
    for run in (store, store.parent.parent):  # a run folder, or RUN/checkpoints/step-N
        if run.exists(RUN_CONFIG):
            return _read_saved(run, RUN_CONFIG), run.url
    for location in (store, store.parent):
        if location.exists(LOCATION_CONFIG):
            return _read_saved(location, LOCATION_CONFIG), None
    raise UserError(f"{path} is neither a run folder nor a checkpoint location, nor a "
                    f"checkpoint in one (no config.yaml or {LOCATION_CONFIG})")


def _read_saved(folder: Store, name: str) -> tuple[str, dict]:
    return (folder / name).url, parse_saved(folder.read_text(name), (folder / name).url)


def write_resolved(cfg, run_dir: str | Path) -> Path:
    """Write the fully resolved config as `RUN/config.yaml` (atomically) and return its path."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = RunFolder(run_dir).config
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(saved_text(cfg))
    tmp.replace(path)
    return path
