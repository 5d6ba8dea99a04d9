"""`zoo new-model NAME`: a new family folder from the template (zoo/_template), registered
with one line, that trains and passes the conformance suite before you change anything."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from core.errors import UserError
from zoo.registry import FAMILIES

TEMPLATE = Path(__file__).resolve().parent / "_template"
REGISTRY = Path(__file__).resolve().parent / "registry.py"


def camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


def scaffold(name: str, parent: Path | None = None) -> Path:
    """Copy the template to PARENT/NAME (default: zoo/NAME, registered in zoo/registry.py)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise UserError(
            f"model family name '{name}' must be lowercase letters, digits and underscores "
            "(models are then called NAME-SIZE, e.g. mynet-tiny)"
        )
    if name in FAMILIES:
        raise UserError(f"a family called '{name}' is already registered; choose another name")
    in_repo = parent is None
    target = (parent or REGISTRY.parent) / name
    if target.exists():
        raise UserError(f"{target} already exists; remove it or choose another name")
    shutil.copytree(TEMPLATE, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in target.rglob("*"):
        if path.is_file():
            text = path.read_text().replace("MyModel", camel(name))
            path.write_text(text.replace("mymodel", name))
    (target / "__init__.py").write_text(f'"""The {name} model family (from the zoo template)."""\n')
    if in_repo:
        register(name)
    return target


def register(name: str) -> None:
    """Add `"NAME": "zoo.NAME.family",` as the last entry of FAMILIES."""
    text = REGISTRY.read_text()
    head, sep, tail = text.partition("FAMILIES = {\n")
    body, close, rest = tail.partition("}\n")
    REGISTRY.write_text(f'{head}{sep}{body}    "{name}": "zoo.{name}.family",\n{close}{rest}')
