"""`zoo export`: a training checkpoint -> a Hugging Face model folder.

Reads the checkpoint's model weights once on the host (no torch_xla needed), writes
config.json, safetensors shards (with an index when there is more than one), tokenizer and
generation config into a temporary folder, and renames it into place when complete.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from safetensors.torch import save_file

from core.errors import UserError
from core.store.checkpoint import load_checkpoint
from core.store.location import Store, local_folder
from core.store.run_folder import RunFolder, step_of
from zoo.app.saved_run import checkpoint_of, load_run

MAX_SHARD_SIZE = "2GB"


def export(checkpoint: str | Path, out: str | Path) -> Path:
    out = Path(local_folder(out, "zoo export OUT"))
    if out.exists():
        raise UserError(f"{out} already exists; remove it or choose another output folder")
    run, _ = load_run(checkpoint)
    family, cfg = run.family, run.config
    if family.hf_class is None:
        raise UserError(f"{family.name} declares no Hugging Face class to export to")
    weights = load_checkpoint(checkpoint_of(checkpoint))
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        hf_config = family.hf_config(cfg.model)
        hf_config.architectures = [family.hf_class]
        family.task.write_hf_extras(cfg, hf_config, tmp)
        hf_config.save_pretrained(tmp)
        _write_weights(weights, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.rename(out)
    return out


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
    in a bucket: in its local copy, and the export pushed to the bucket)."""
    folder = checkpoint_of(checkpoint)
    home = load_run(checkpoint)[1]
    out = RunFolder(home.local).export(step_of(Store(folder).name))
    if not _complete(out):  # never made, or damaged (a copy cut short): made again
        shutil.rmtree(out, ignore_errors=True)
        export(folder, out)
        home.push(out.relative_to(home.local).as_posix())
    return out


def describe_export(checkpoint: str | Path, folder: Path) -> str:
    """The line `zoo export` ends with: the folder, and the transformers class it loads as."""
    hf_class = json.loads((folder / "config.json").read_text())["architectures"][0]
    return f"exported {checkpoint} -> {folder} (loads with transformers' {hf_class})"

