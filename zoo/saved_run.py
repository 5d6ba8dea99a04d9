"""Finding things in run folders (layout: core/run_folder.py) and in checkpoint locations
elsewhere (`checkpoint_dir`, e.g. gs://bucket/run), which keep a copy of the run's config as
`run-config.yaml` so a checkpoint there can be exported or sampled on its own."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from zoo.core.checkpoint import complete_steps
from zoo.core.errors import UserError
from zoo.core.run_folder import LOCATION_CONFIG, RunFolder, step_dir_name, step_of
from zoo.core.store import Store


def load_run(path: str | Path):
    """(family, resolved run config, local run folder) for a run folder, a checkpoint
    location holding `run-config.yaml`, or a checkpoint folder in either."""
    from zoo.compose import load_run_config

    text, run_dir = _saved_config(str(path))
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as copy:
        copy.write(text)
        copy.flush()
        model_name = _model_name(text)
        family, cfg = load_run_config(model_name, [], [copy.name])
    if run_dir:  # the folder given, not the `out` saved in it: a copied run reads its own
        cfg = dataclasses.replace(cfg, out=run_dir)
    return family, cfg, Path(cfg.out)


def checkpoint_of(path: str | Path) -> str:
    """The checkpoint folder `path` names: itself, or the newest committed checkpoint of the
    run (in the run's checkpoint location, wherever that is) or of the location."""
    path = str(path)
    if step_of(Store(path).name) is not None:
        return path
    _, cfg, _ = load_run(path)
    for location in (Store(path), Store(cfg.checkpoint_location)):
        steps = complete_steps(location)
        if steps:
            return (location / step_dir_name(steps[-1])).url
    raise UserError(f"run {path} has no complete checkpoint yet (looked in "
                    f"{cfg.checkpoint_location})")


def _saved_config(path: str) -> tuple[str, str | None]:
    """The run's config text, and its run folder when `path` is in one."""
    store = Store(path)
    if store.local:
        try:
            run = RunFolder.containing(path)
            return run.config.read_text(), str(run.path)
        except UserError:
            pass
    for location in (store, store.parent):
        if location.exists(LOCATION_CONFIG):
            return location.read_text(LOCATION_CONFIG), None
    raise UserError(f"{path} is neither a run folder nor a checkpoint location, nor a "
                    f"checkpoint in one (no config.yaml or {LOCATION_CONFIG})")


def _model_name(text: str) -> str:
    import yaml

    return yaml.safe_load(text)["model_name"]
