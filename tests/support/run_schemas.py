"""Every run schema zoo builds (each family with each task it trains for) and their keys,
for the tests that hold the schema's metadata and its docs to the dataclasses."""

from __future__ import annotations

import dataclasses
import functools

from core.run_config import schema_keys
from zoo import registry
from zoo.app.run import run_schema


@functools.cache
def run_schemas() -> dict[tuple[str, str], type]:
    """{(family, task): the run schema `zoo train FAMILY-SIZE task=TASK` reads}."""
    schemas = {}
    for name in registry.FAMILIES:
        family = registry.family(name)
        size = next(iter(family.sizes))
        for task_name in (family.task.name, *registry.variants_for(family.task)):
            task = family.task_named(task_name)
            schemas[name, task.name] = run_schema(family, size, task)
    return schemas


def own_tasks() -> set[str]:
    """The families' own tasks; every other task a schema is built for is a variant (sft)."""
    return {registry.family(name).task.name for name in registry.FAMILIES}


def leaf_keys(schema: type) -> dict[str, tuple[type, object]]:
    """{dotted key: (type, default)} for every key of `schema` that holds a value (not a
    section), the family's architecture (`model.*`) left out. Defaults are read from an
    instance: a task may give a section another default (vit's `optim`: lr 1e-3)."""
    default = schema()
    return {key: (kind, functools.reduce(getattr, key.split("."), default))
            for key, _, kind in schema_keys(schema)
            if not dataclasses.is_dataclass(kind) and not key.startswith("model.")}
