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

from core import lora
from core.cache import cache_home
from core.errors import UserError
from core.hf import misfit, read_config
from core.json_file import read_json_object
from core.store.location import Store, local_folder
from core.store.run_folder import RunFolder, step_of
from core.store.run_home import RunHome
from zoo.app.init_from import adapted_model, model_weights
from zoo.app.run import Run
from zoo.app.saved_run import checkpoint_of, load_run, newest_weights, refuse_misfit

MAX_SHARD_SIZE = "2GB"
ADAPTER_CONFIG = "adapter_config.json"  # what makes a folder PEFT's adapter folder


def export(checkpoint: str | Path, out: str | Path, adapter: bool = False) -> Exported:
    """Write the newest checkpoint `checkpoint` names as a Hugging Face folder `out` (a LoRA
    run's adapters merged into its base), or with `adapter` a LoRA run's adapters as a PEFT
    adapter folder over its base."""
    out = Path(local_folder(out, "zoo export OUT"))
    if out.exists():
        raise UserError(f"{out} already exists; remove it or choose another output folder")
    run, _ = load_run(checkpoint)
    if run.family.hf_class is None:
        raise UserError(f"{run.family.name} declares no Hugging Face class to export to")
    if adapter:
        base = _adapter_base(run, checkpoint)
        folder, weights = newest_weights(checkpoint)
        _written(out, lambda tmp: _write_adapter(run, weights, base, folder, tmp))
    else:
        folder, weights = model_weights(checkpoint)
        _write(run, weights, out, folder)
    return Exported(folder, out)


def _adapter_base(run: Run, checkpoint: str | Path) -> str:
    """The Hugging Face folder (or Hub name) a LoRA run's adapters apply to: its
    --init-from, exported first when that is a zoo run."""
    cfg = run.config
    if not run.adapters:
        raise UserError(f"{checkpoint} trained every weight (lora.rank=0), so it has no "
                        "adapter; export it without --adapter")
    if not cfg.init_from:
        raise UserError(f"{checkpoint} trained its adapters on random weights (no "
                        "--init-from), which no Hugging Face folder holds; export the merged "
                        "model (without --adapter)")
    from zoo.app.saved_run import is_saved_run  # start-up

    return str(cached_export(cfg.init_from)) if is_saved_run(cfg.init_from) else cfg.init_from


def _write_adapter(run: Run, adapters: dict, base: str, checkpoint: str, folder: Path) -> None:
    """PEFT's adapter folder and the tokenizer, after the base is checked to be the one the
    run trained on."""
    model = adapted_model(run, checkpoint, adapters)  # refuses another base than the run's
    write_peft_adapter(model, run.adapters, base, folder)
    run.task.write_hf_extras(run.config, run.family.hf_config(run.config.model), folder)


def write_peft_adapter(model, config: lora.LoraConfig, base: str, folder: Path) -> None:
    """`model`'s adapters as PEFT's adapter folder over `base`: adapter_config.json and
    adapter_model.safetensors, with PEFT's names and layouts (core/lora.py `as_peft`)."""
    import peft  # start-up

    targets, state = lora.as_peft(model, config)
    peft.LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=config.dropout,
                    **targets, base_model_name_or_path=base,
                    task_type="CAUSAL_LM").save_pretrained(folder)
    save_file(state, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})


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

    def fill(tmp: Path) -> None:
        run.task.write_hf_extras(cfg, hf_config, tmp)
        hf_config.save_pretrained(tmp)
        _write_weights(weights, tmp)

    _written(out, fill)


def _written(out: Path, fill) -> None:
    """`fill(folder)` writes into a folder beside `out`, renamed into place once complete
    (removed if it fails): no half-written export is ever taken for one."""
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        fill(tmp)
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


def adapter_base(path: str | Path) -> str | None:
    """The base model (a folder or Hub name) of a PEFT adapter folder (`zoo export
    --adapter`'s, or any other); None for other paths."""
    config = Path(path) / ADAPTER_CONFIG
    if "://" in str(path) or not config.is_file():
        return None
    base = read_json_object(config, "export the adapter again (zoo export RUN OUT "
                            "--adapter)").get("base_model_name_or_path")
    if not base:
        raise UserError(f"{config} names no base model (base_model_name_or_path); add the "
                        "folder or Hub name of the model the adapter was trained on")
    return base


def tokenizer_folder(folder: Path) -> str:
    """Where a model folder's tokenizer is: the folder, or the base (a folder or Hub name)
    of an adapter folder that has none."""
    base = adapter_base(folder)
    return base if base and not (folder / "tokenizer_config.json").is_file() else str(folder)


def cached_export(checkpoint: str | Path) -> Path:
    """Export a run's checkpoint once into RUN/hf/step-N and reuse it on later calls (a run
    in a bucket: in its local copy, and the export pushed to the bucket; a run on a disk
    this user cannot write: in zoo's cache)."""
    run, home = load_run(checkpoint)
    out = _export_folder(home, checkpoint_of(checkpoint))
    if _complete(out):
        return out
    folder, weights = model_weights(checkpoint)  # a newer one if that one was rotated away
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
    loads as (an adapter folder: the base peft loads it over)."""
    adapter = exported.folder / ADAPTER_CONFIG
    if adapter.is_file():
        base = json.loads(adapter.read_text())["base_model_name_or_path"]
        loads = f"a LoRA adapter: peft.PeftModel.from_pretrained over {base}"
    else:
        hf_class = read_config(str(exported.folder)).get("architectures", ["?"])[0]
        loads = f"loads with transformers' {hf_class}"
    return f"exported step {exported.step} ({exported.checkpoint}) -> {exported.folder} ({loads})"
