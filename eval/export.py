"""`zoo export`: a training checkpoint -> a Hugging Face model folder.

Reads the checkpoint's model weights once on the host (no torch_xla needed), writes
config.json, safetensors shards (with an index when there is more than one), tokenizer and
generation config into a temporary folder, and renames it into place when complete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

from safetensors.torch import save_file

from core.cache import cache_home
from core.errors import UserError
from core.hf import misfit, read_config
from core.store.location import Store, local_folder
from core.store.run_folder import RunFolder, step_of
from core.store.run_home import RunHome
from zoo.app.run import Run
from zoo.app.saved_run import checkpoint_of, load_run, newest_weights, refuse_misfit

MAX_SHARD_SIZE = "2GB"


def export(checkpoint: str | Path, out: str | Path) -> Exported:
    """Write the newest checkpoint `checkpoint` names as a Hugging Face folder `out`."""
    out = Path(local_folder(out, "zoo export OUT"))
    if out.exists():
        raise UserError(f"{out} already exists; remove it or choose another output folder")
    run, _ = load_run(checkpoint)
    if run.family.hf_class is None:
        raise UserError(f"{run.family.name} declares no Hugging Face class to export to")
    folder, weights = newest_weights(checkpoint)
    _write(run, weights, out, folder)
    return Exported(folder, out)


@dataclasses.dataclass(frozen=True)
class Exported:
    checkpoint: str  # the checkpoint folder read (step-N)
    folder: Path  # the Hugging Face folder written

    @property
    def step(self) -> int:
        return step_of(Store(self.checkpoint).name)


def _write(run: Run, weights: dict, out: Path, checkpoint: str) -> None:
    """The export, written beside `out` and renamed into place once complete; refused first
    when the run's config and the weights disagree (a config edited after training), so no
    folder that would not load is ever made."""
    family, cfg = run.family, run.config
    hf_config = family.hf_config(cfg.model)
    hf_config.architectures = [family.hf_class]
    refuse_misfit(checkpoint, misfit(family.hf_class, hf_config, weights))
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        run.task.write_hf_extras(cfg, hf_config, tmp)
        hf_config.save_pretrained(tmp)
        _write_weights(weights, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.rename(out)


def _write_weights(weights: dict, folder: Path) -> None:
    from huggingface_hub import split_torch_state_dict_into_shards  # huggingface_hub

    split = split_torch_state_dict_into_shards(weights, max_shard_size=MAX_SHARD_SIZE)
    for filename, names in split.filename_to_tensors.items():
        save_file({n: weights[n].contiguous() for n in names}, str(folder / filename),
                  metadata={"format": "pt"})
        (folder / filename).chmod(0o644)  # safetensors creates files owner-only
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _complete(folder: Path) -> bool:
    """A Hugging Face folder with its config and every weights file it names."""
    index = folder / "model.safetensors.index.json"
    try:
        shards = (set(json.loads(index.read_text())["weight_map"].values()) if index.is_file()
                  else {"model.safetensors"})
    except (ValueError, KeyError):
        return False
    return (folder / "config.json").is_file() and all((folder / s).is_file() for s in shards)


def cached_export(checkpoint: str | Path) -> Path:
    """Export a run's checkpoint once into RUN/hf/step-N and reuse it on later calls (a run
    in a bucket: in its local copy, and the export pushed to the bucket; a run on a disk
    this user cannot write: in zoo's cache)."""
    run, home = load_run(checkpoint)
    out = _export_folder(home, checkpoint_of(checkpoint))
    if _complete(out):
        return out
    folder, weights = newest_weights(checkpoint)  # a newer one if that one was rotated away
    out = _export_folder(home, folder)
    shutil.rmtree(out, ignore_errors=True)  # never made, or damaged (a copy cut short)
    _write(run, weights, out, folder)
    if out.is_relative_to(home.local):
        home.push(out.relative_to(home.local).as_posix())
    return out


def _export_folder(home: RunHome, checkpoint: str) -> Path:
    """RUN/hf/step-N, or its place in zoo's cache when the run folder is read-only."""
    out = RunFolder(home.local).export(step_of(Store(checkpoint).name))
    writable = next(p for p in (out, *out.parents) if p.exists())
    if os.access(writable, os.W_OK):
        return out
    run_key = hashlib.sha256(str(home.local).encode()).hexdigest()[:16]
    return cache_home() / "exports" / run_key / out.name


def describe_export(exported: Exported) -> str:
    """The line `zoo export` ends with: the step, the folder, the transformers class it
    loads as."""
    hf_class = read_config(str(exported.folder)).get("architectures", ["?"])[0]
    return (f"exported step {exported.step} ({exported.checkpoint}) -> {exported.folder} "
            f"(loads with transformers' {hf_class})")
