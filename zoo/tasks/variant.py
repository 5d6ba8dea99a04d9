"""What a module declares to add a task picked with `task=NAME` on top of a family's own
task (sft and dpo on any causal LM; KTO, ORPO, GRPO...): `VARIANT = TaskVariant(...)` at
its top level. zoo/registry.py finds it, in zoo/tasks, through a `zoo.tasks` entry point or
ZOO_TASKS, as it finds families: no list elsewhere names it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from core.task import Task

T = TypeVar("T", bound=Task)


@dataclasses.dataclass(frozen=True)
class TaskVariant:
    builds_on: type[Task]  # the family tasks it applies to (a CausalLM: every causal LM)
    # (the family's own task, the family: a zoo.registry.ModelFamily, on a floor above this
    # one, with its model class, FLOPs, KV-cache layout) -> the task, named as the variant
    build: Callable[[Task, Any], Task]
    # its place among a family's tasks where they are listed (an unknown task=NAME's error):
    # lower first, then by name
    rank: int = 100


def on_top_of(family_task: Task, variant_cls: type[T]) -> type[T]:
    """`variant_cls` (a subclass of `builds_on`) over the family task's own class, so what
    that class adds (a mixture of experts' router loss) stays and the variant overrides the
    rest."""
    return _mixed(variant_cls, type(family_task))


@functools.cache  # one class per pair: a task asked for twice is of the same class
def _mixed(variant_cls: type[T], family_cls: type[Task]) -> type[T]:
    if issubclass(variant_cls, family_cls):
        return variant_cls
    return type(variant_cls.__name__, (variant_cls, family_cls),
                {"__module__": variant_cls.__module__})
