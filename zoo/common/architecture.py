"""Which keys of a model config are its architecture, what a checkpoint's weights fit, and
which only say how the model runs (its attention kernel, how a MoE dispatches, the loss's
chunks, an auxiliary loss's weight): a run started from a checkpoint (`--init-from`) takes
the first from it and the second from the user.

A field is architectural unless its config class, or a class it inherits, declares it
`run_time(...)`: a new family gets the split for free, and a key nobody marked is kept
from the checkpoint (refused when changed), never silently trained on weights it does not
fit."""

from __future__ import annotations

import dataclasses

RUN_TIME = "run_time"


def run_time(default):
    """A model config field that says how the model runs, not what its weights are."""
    return dataclasses.field(default=default, metadata={RUN_TIME: True})


def run_time_keys(config_cls: type) -> frozenset[str]:
    """The fields any class in `config_cls`'s lineage declares `run_time` (a subclass that
    only changes such a field's default keeps it run-time)."""
    return frozenset(field.name for cls in config_cls.__mro__
                     if dataclasses.is_dataclass(cls)
                     for field in vars(cls).get("__dataclass_fields__", {}).values()
                     if field.metadata.get(RUN_TIME))


def architecture(config) -> dict:
    """{field: value} of `config`'s architectural fields."""
    run = run_time_keys(type(config))
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if f.name not in run}


def with_architecture(config, source):
    """`config` with `source`'s architecture (its run-time fields kept)."""
    return dataclasses.replace(config, **architecture(source))


def changed_architecture(config, source) -> dict[str, tuple]:
    """{field: (value in `config`, value in `source`)} where the two architectures differ."""
    theirs = architecture(source)
    return {name: (value, theirs[name]) for name, value in architecture(config).items()
            if value != theirs[name]}
