"""`zoo new-model NAME`: a new family folder from the template (zoo/_template) that trains
and passes the conformance suite before you change anything. A folder in zoo/ is found by
the registry as it is; one elsewhere is registered with ZOO_FAMILIES or an entry point."""

from __future__ import annotations

import importlib.util
import keyword
import re
import shutil
import sys
from pathlib import Path

from core.errors import UserError
from zoo.registry import FAMILIES

FAMILIES_DIR = Path(__file__).resolve().parents[1]
TEMPLATE = FAMILIES_DIR / "_template"
# the project's other top-level packages: a family named so would read as one of them
PROJECT_PACKAGES = ("zoo", "core", "benchmarks", "eval", "tools")


def camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


def check_not_shadowing(name: str) -> None:
    """Refuse a name whose package would shadow another or read as one: zoo/registry
    beside zoo.registry breaks every import of the zoo (`zoo models` first), a family
    called `core` reads as the runtime, a standard-library name breaks imports wherever the
    family's parent folder is on the path, and a keyword cannot be imported."""
    if keyword.iskeyword(name):
        raise UserError(f"model family name '{name}' is a Python keyword; choose another name")
    if name in sys.stdlib_module_names:
        raise UserError(f"model family name '{name}' is a Python standard-library module; "
                        "choose another name")
    if name in PROJECT_PACKAGES or importlib.util.find_spec(f"zoo.{name}") is not None:
        raise UserError(f"model family name '{name}' is already a zoo package or module; "
                        "choose another name")


def scaffold(name: str, parent: str | Path | None = None) -> Path:
    """Copy the template to PARENT/NAME (default: zoo/NAME)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise UserError(
            f"model family name '{name}' must be lowercase letters, digits and underscores "
            "(models are then called NAME-SIZE, e.g. mynet-tiny)"
        )
    if name in FAMILIES:
        raise UserError(f"a family called '{name}' is already registered; choose another name")
    check_not_shadowing(name)
    target = Path(parent or FAMILIES_DIR) / name
    if target.exists():
        raise UserError(f"{target} already exists; remove it or choose another name")
    shutil.copytree(TEMPLATE, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in target.rglob("*"):
        if path.is_file():
            text = path.read_text().replace("MyModel", camel(name))
            path.write_text(text.replace("mymodel", name))
    (target / "__init__.py").write_text(f'"""The {name} model family (from the zoo template)."""\n')
    return target


def next_steps(name: str, target: Path, parent: str | Path | None) -> str:
    """What `zoo new-model` says it made, how a folder out of the tree is registered, and
    what to run next."""
    lines = [f"created {target}/ (config, model, family, sharding/)"]
    if parent:
        lines.append(f"register it: export ZOO_FAMILIES={name}={name}.family "
                     f"PYTHONPATH={Path(parent).resolve()} (or a `zoo.families` entry point)")
    lines.append(f"next: zoo train {name}-tiny --tpu cpu-4 --steps 50; pytest -k {name}")
    return "\n".join(lines)

