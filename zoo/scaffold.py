"""`zoo new-model NAME`: a new family folder from the template (zoo/_template) that trains
and passes the conformance suite before you change anything. A folder in zoo/ is found by
the registry as it is; one elsewhere is registered with ZOO_FAMILIES or an entry point."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from zoo.core.errors import UserError
from zoo.registry import FAMILIES

TEMPLATE = Path(__file__).resolve().parent / "_template"
ZOO_DIR = Path(__file__).resolve().parent


def camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


def scaffold(name: str, parent: Path | None = None) -> Path:
    """Copy the template to PARENT/NAME (default: zoo/NAME)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise UserError(
            f"model family name '{name}' must be lowercase letters, digits and underscores "
            "(models are then called NAME-SIZE, e.g. mynet-tiny)"
        )
    if name in FAMILIES:
        raise UserError(f"a family called '{name}' is already registered; choose another name")
    target = (parent or ZOO_DIR) / name
    if target.exists():
        raise UserError(f"{target} already exists; remove it or choose another name")
    shutil.copytree(TEMPLATE, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in target.rglob("*"):
        if path.is_file():
            text = path.read_text().replace("MyModel", camel(name))
            path.write_text(text.replace("mymodel", name))
    (target / "__init__.py").write_text(f'"""The {name} model family (from the zoo template)."""\n')
    return target
