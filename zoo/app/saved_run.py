"""Finding things in run folders (layout: core/store/run_folder.py) and in checkpoint locations
elsewhere (`checkpoint_dir`, e.g. gs://bucket/run), which keep a copy of the run's config as
`run-config.yaml` so a checkpoint there can be exported or sampled on its own."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from core.config import read_saved_config
from core.errors import UserError
from core.json_file import DamagedFile
from core.store.checkpoint_reader import complete_steps, load_checkpoint
from core.store.location import Store, answered, reason
from core.store.manifest import is_committed
from core.store.run_folder import step_dir_name, step_of
from core.store.run_home import RunHome
from zoo.app.run import Run, resolve_run

ROTATION_RETRIES = 3  # reads a checkpoint rotated away by a running trainer, then gives up


def load_run(path: str | Path) -> tuple[Run, RunHome]:
    """(the run, its RunHome) for a run folder (a path or a URL), a checkpoint location
    holding `run-config.yaml`, or a checkpoint folder in either."""
    try:
        saved, run_dir = answered(lambda: read_saved_config(str(path)))
    except UserError:
        raise
    except Exception as error:  # a bucket out of reach, a folder not readable
        raise UserError(f"cannot read {path}: {reason(error)}") from None
    model_name = saved[1].get("model_name")
    if not isinstance(model_name, str):
        raise UserError(f"{saved[0]} names no model (model_name); it is not a zoo run config")
    run = resolve_run(model_name, [], [saved], saved=True)
    if run_dir:  # the folder given, not the `out` saved in it: a copied run reads its own
        run = run.with_config(dataclasses.replace(run.config, out=run_dir))
    return run, RunHome(run.config.out)


def checkpoint_of(path: str | Path, run: Run | None = None) -> str:
    """The checkpoint folder `path` names: itself, or the newest committed checkpoint of the
    run (in the run's checkpoint location, wherever that is) or of the location; `run`: the
    run at `path` where the caller loaded it already."""
    path = str(path)
    if step_of(Store(path).name) is not None:
        return path
    cfg = (run or load_run(path)[0]).config
    for location in (Store(path), Store(cfg.checkpoint_location)):
        steps = complete_steps(location)
        if steps:
            return (location / step_dir_name(steps[-1])).url
    raise UserError(f"run {path} has no complete checkpoint yet (looked in "
                    f"{cfg.checkpoint_location})")


def newest_weights(path: str | Path) -> tuple[str, dict]:
    """(the checkpoint folder read, its weights: a LoRA run's adapters alone, see
    zoo/app/init_from.py's model_weights) for what `checkpoint_of(path)` names. A trainer
    that keeps few checkpoints may remove the newest one while it is read here (a newer one
    took its place): then the newest is read again, and said so."""
    for _ in range(ROTATION_RETRIES):
        folder = checkpoint_of(path)
        try:
            return folder, load_checkpoint(folder)
        except (OSError, UserError):
            if is_committed(Store(folder)):
                raise  # not rotated away: a real error
            if str(folder) == str(path):  # asked for that very checkpoint
                raise UserError(f"checkpoint {path} was removed while it was read (a running "
                                "trainer keeps only its newest keep_checkpoints); read a "
                                "newer one, or the run folder") from None
        print(f"note: {folder} was replaced by a newer checkpoint of the running trainer "
              "while it was read; reading the newest", file=sys.stderr)
    raise UserError(f"the checkpoints of {path} were replaced {ROTATION_RETRIES} times while "
                    "being read; retry once the run saves less often, or after it ends")


def refuse_misfit(checkpoint: str, problem: str | None) -> None:
    """One line when a checkpoint's weights do not fit the model its run's config describes
    (`problem`, from core.hf.misfit or core.store.checkpoint_reader.first_misfit)."""
    if problem:
        raise UserError(f"{checkpoint} does not fit the model its run's config describes "
                        f"({problem}); was the run's config edited after training? restore "
                        "it and try again")


def is_saved_run(path: str) -> bool:
    """Whether `path` is a run folder, a checkpoint location or a checkpoint in either (a
    URL always counts: a Hugging Face Hub name has none). A run config that is there but
    damaged makes it one (and is refused when read), not a Hugging Face folder."""
    if "://" in path:
        return True
    try:
        read_saved_config(path)
    except DamagedFile:
        return True
    except UserError:
        return False
    return True
