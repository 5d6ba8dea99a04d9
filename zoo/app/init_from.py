"""`zoo train --init-from X`: the weights a run starts from, identified whole once, before
any model is built. X is a zoo run folder or checkpoint (its newest weights), or a Hugging
Face folder or Hub name (its safetensors). Either brings:

- its architecture: a Hugging Face folder's from its config.json (every key its weights'
  shapes are read from present: nothing guessed from transformers' defaults), named by the
  zoo size it equals, else by its family alone; a model name of another size is refused;
- its weights, checked before any is read: each safetensors file's header against the
  file's size (a file cut short) and, through the family's own loader on a meta model,
  against the shapes the architecture implies;
- its tokenizer: the run uses it unless it names another (`data.tokenizer`); a Hugging
  Face folder without one is refused unless the run names one (the token ids of
  pretrained weights mean nothing under another tokenizer);
- its place: a local path is kept absolute, so the run's other commands (generate,
  export, eval, a LoRA run's base) find it from any directory.

The run's own `model.*` keys that say how the model runs (attention kernel, MoE dispatch,
loss chunks, aux-loss weights: zoo/common/architecture.py) are honoured on top of that
architecture; one that would change it is refused naming the folder's value.

    zoo train --init-from runs/llama-tiny task=sft        # the family is the run's
    zoo train --init-from ~/Qwen-like-llama task=sft      # the family from config.json
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from core.errors import UserError
from core.hf import (
    TOKENIZER_REMEDY,
    VOCABULARY_FILES,
    check_architecture,
    check_tokenizer,
    headers_only,
    local_dir,
    read_config,
    safetensors_headers,
)
from zoo.common.architecture import changed_architecture, run_time_keys, with_architecture
from zoo.registry import (
    ModelFamily,
    check_host_memory,
    family_for_hf_architecture,
    resolve_name,
)

TOKENIZER_FILES = ("tokenizer_config.json", *VOCABULARY_FILES)
SHOWN_DIFFERENCES = 3  # architecture keys a refusal names


@dataclasses.dataclass(frozen=True)
class StartingPoint:
    """Where the weights come from and what comes with them."""

    source: str  # an absolute local path, a URL or a Hub name
    family: ModelFamily
    zoo_run: bool  # a zoo run or checkpoint, else a Hugging Face folder
    model_name: str  # the zoo size its architecture equals, else its family's name
    model: object  # the family's model config the weights fit
    tokenizer: str | None  # the tokenizer the weights were trained with, if known

    def apply(self, config, tokenizer_chosen: bool = False):
        """The run config on this starting point: its architecture (the run's run-time
        `model.*` keys kept), its name, its source as resolved, and its tokenizer unless
        the run names another (`tokenizer_chosen`: the run gave `data.tokenizer`, maybe
        the shipped `default`)."""
        changes = {"model": with_architecture(config.model, self.model),
                   "model_name": self.model_name, "init_from": self.source}
        data = getattr(config, "data", None)
        if getattr(data, "tokenizer", None) == "default" and not tokenizer_chosen:
            if self.tokenizer is None and not self.zoo_run:
                raise UserError(
                    f"--init-from {self.source} holds no tokenizer ({', '.join(TOKENIZER_FILES)})"
                    ": its weights' token ids mean nothing under another; pass "
                    "data.tokenizer=NAME_OR_FOLDER (the one they were trained with)")
            if self.tokenizer:
                changes["data"] = dataclasses.replace(data, tokenizer=self.tokenizer)
        return dataclasses.replace(config, **changes)

    def refuse_changed_architecture(self, model) -> None:
        """One line when the run's `model` (its config's, overrides applied) changes the
        architecture these weights fit."""
        changed = changed_architecture(model, self.model)
        if changed:
            key, (given, held) = next(iter(changed.items()))
            run_time = ", ".join(f"model.{k}" for k in sorted(run_time_keys(type(model))))
            raise UserError(f"model.{key}={given} would change the architecture of --init-from "
                            f"{self.source}, which holds {key}={held}: its weights fit that "
                            f"only; drop it (what may be set: {run_time or 'none'})")

    def load(self, model, announce: bool = True) -> None:
        """The weights into `model` (built from `apply`'s config), by exact name; said on
        stdout unless `announce` is off (a LoRA run's base, reloaded under another command's
        output: `zoo generate`'s text)."""
        if not self.zoo_run:
            self.family.load_hf(model, self.source)
            loaded = f"{self.source} ({self.family.hf_class})"
        else:
            from core.hf import load_state

            loaded, weights = model_weights(self.source)
            load_state(model, weights, loaded)
        if announce:
            print(f"init: weights of {loaded}")


def starting_point(source: str, model_name: str | None) -> StartingPoint:
    """What `--init-from source` starts from; `model_name` (None: the source's own) must
    name it: its own name, or its family's alone."""
    found = _from_zoo_run(source) if _is_zoo_run(source) else _from_hf(source, model_name)
    if model_name and model_name not in (found.model_name, found.family.name):
        raise UserError(f"--init-from {source} holds a {found.model_name} model, not "
                        f"{model_name}; name no model (the starting point's own) or its own")
    return found


def resolve_started_run(model_name: str, overrides: list[str], config_files=()):
    """(the run, its starting point or None) that `zoo train/plan MODEL --config F...
    KEY=VALUE...` describe: the starting point identified first, whole, and handed to the
    run (zoo/app/run.py `resolve_run`)."""
    from zoo.app.run import resolve_run  # the families

    start = given_starting_point(model_name, config_files, overrides)
    return resolve_run(model_name, overrides, config_files, start=start), start


def given_starting_point(model_name: str | None, config_files, overrides,
                         kept: dict | None = None):
    """The run's `init_from`, identified: the one given, else the one of the run already in
    its `out` (a rerun there resumes it without being told again; `kept`: that run's config
    where the caller read it already, see kept_config); None: a random start."""
    from core import config as config_lib

    source = config_lib.given_value("init_from", config_files, overrides)
    if not source:
        out = config_lib.given_value("out", config_files, overrides)
        source = kept_init_from(out, kept_config(out) if kept is None else kept)
    return starting_point(source, model_name) if source else None


def kept_init_from(out: str | None, kept: dict) -> str | None:
    """The starting point of the run already in `out` (`kept`: its config), which a rerun
    there keeps without being told (`zoo train --out RUN` resumes an --init-from run); said
    on stderr."""
    source = kept_setting(kept, "init_from")
    if source:
        print(f"note: {out} started from --init-from {source}; resuming from it",
              file=sys.stderr)
    return source


def kept_config(out: str | None) -> dict:
    """The saved config of the run already in `out` ({}: no run there). A local run folder
    only: `out` is not checked yet, and a URL's is not read before the run's config is (a
    run folder in a bucket is rerun with its model and --init-from). A config cut short is
    refused (core/config.py parse_saved)."""
    from core.config import parse_saved
    from core.store.run_folder import RUN_CONFIG

    saved = Path(out, RUN_CONFIG) if out and "://" not in out else None
    try:
        text = saved.read_text() if saved and saved.is_file() else None
    except (OSError, UnicodeDecodeError):  # the resume check names what is wrong with it
        text = None
    return parse_saved(text, str(saved)) if text is not None else {}


def kept_setting(kept: dict, key: str) -> str | None:
    """A top-level string setting of a run's saved config `kept` (None: not set)."""
    value = kept.get(key)
    return value if isinstance(value, str) and value else None


def resolved_source(source: str) -> str:
    """A local path absolute (as `--init-from` is stored); a URL or Hub name as given."""
    path = Path(source).expanduser()
    return str(path.resolve()) if "://" not in source and path.exists() else source


def _is_zoo_run(source: str) -> bool:
    from zoo.app.saved_run import is_saved_run

    return is_saved_run(source)


def _from_zoo_run(source: str) -> StartingPoint:
    """The run's architecture and tokenizer, once its newest checkpoint is known whole."""
    from core.store.checkpoint_reader import check_whole
    from core.store.location import Store
    from zoo.app.saved_run import checkpoint_of, load_run

    run = load_run(source)[0]
    check_whole(Store(checkpoint_of(source, run)))
    tokenizer = getattr(getattr(run.config, "data", None), "tokenizer", None)
    return StartingPoint(resolved_source(source), run.family, True, run.model_name,
                         run.config.model, tokenizer)


def _from_hf(source: str, model_name: str | None) -> StartingPoint:
    """The family is the named model's (whose class the folder must hold), else the one
    whose class config.json names; the size is the one the folder's architecture equals."""
    if source.startswith((".", "/", "~")) and not Path(source).expanduser().exists():
        raise UserError(f"--init-from {source}: no such folder; give a zoo run folder or "
                        "checkpoint, or a Hugging Face folder or Hub name")
    source = resolved_source(source)
    architectures = read_config(source).get("architectures") or []
    if model_name:
        family = resolve_name(model_name)[0]
    elif architectures:
        family = family_for_hf_architecture(architectures[0])
    else:
        raise UserError(f"{source}/config.json names no architecture (architectures); name "
                        "the model to start it as (zoo train MODEL --init-from ...)")
    if family.load_hf is None:
        raise UserError(f"{family.name} cannot load Hugging Face checkpoints (--init-from)")
    check_architecture(source, family.hf_class)
    folder = local_dir(source)
    safetensors_headers(folder)  # files cut short or damaged: before transformers is read
    try:
        model = family.config_from_hf(source)
    except (ValueError, TypeError) as error:
        raise UserError(f"--init-from {source}: config.json {error}") from None
    size = next((size for size, config in family.sizes.items()
                 if not changed_architecture(model, config)), None)
    own = f"{family.name}-{size}" if size else family.name
    if model_name and model_name not in (own, family.name):
        raise UserError(f"--init-from {source} holds a {family.name} of "
                        f"{_differences(model, resolve_name(model_name)[0], model_name)}; name "
                        f"{own} or no model (the folder's own)")
    _check_weights(family, model, source)
    return StartingPoint(source, family, False, own, model, _tokenizer(folder))


def _tokenizer(folder: Path) -> str | None:
    """The folder's tokenizer, checked whole (its JSON files, a vocabulary and its
    tokenizer_config.json); None when it holds none."""
    if not any((folder / name).exists() or (folder / name).is_symlink()
               for name in TOKENIZER_FILES):
        return None
    check_tokenizer(folder)
    if not (folder / "tokenizer_config.json").is_file():
        raise UserError(f"{folder} has no tokenizer_config.json: its tokenizer is incomplete; "
                        f"{TOKENIZER_REMEDY}")
    return str(folder)


def _differences(model, family: ModelFamily, name: str) -> str:
    """'hidden_size 64, num_hidden_layers 2, not qwen3-0.6b (1024, 28)': how `model`'s
    architecture differs from size `name`'s."""
    named = family.sizes[resolve_name(name)[1]]
    changed = list(changed_architecture(model, named).items())[:SHOWN_DIFFERENCES]
    ours = ", ".join(f"{key} {value}" for key, (value, _) in changed)
    theirs = ", ".join(f"{key} {value}" for key, (_, value) in changed)
    return f"{ours}, not {name} ({theirs})"


def _check_weights(family: ModelFamily, model, source: str) -> None:
    """The folder's safetensors headers against its files' sizes and, through the family's
    loader on a meta model, against the shapes `model` implies; no weight is read."""
    import torch  # start-up

    with torch.device("meta"):
        meta = family.build(model, init=False)
    with headers_only():
        family.load_hf(meta, source)


def default_out(source: str, task: str | None) -> str:
    """The run folder of a run named by its starting point: runs/<its name>-<task>."""
    return f"runs/{Path(source.rstrip('/')).name}-{task or 'tuned'}"


def model_weights(source: str) -> tuple[str, dict]:
    """(the checkpoint folder read, the model's full weights) of a zoo run or checkpoint. A
    LoRA run's checkpoints hold its adapters alone (core/store/checkpoint.py): its model is
    its base, loaded again from where the run started, with the adapters merged in."""
    from core import lora  # torch
    from zoo.app.saved_run import load_run, newest_weights  # torch, the checkpoint readers

    run = load_run(source)[0]
    check_host_memory(run.family, run.config.model)  # before its weights are read
    checkpoint, weights = newest_weights(source)
    if not run.adapters:
        return checkpoint, weights
    model = adapted_model(run, checkpoint, weights)
    return checkpoint, lora.merged(model.state_dict(), run.adapters.scale)


def adapted_model(run, checkpoint: str, adapters: dict):
    """A LoRA run's model on the host: its base (`init_from`, or the seed of a random
    start), checked against the fingerprint its checkpoint saved, with the checkpoint's
    adapters (`adapters`: its weights), unmerged, as it trained."""
    from core.store import frozen_base  # torch
    from core.store.checkpoint_reader import saved_extra  # torch

    cfg = run.config
    model = run.family.build(cfg.model, seed=cfg.seed)
    if cfg.init_from:
        starting_point(cfg.init_from, cfg.model_name).load(model, announce=False)
    model = run.transform_model(model, seed=cfg.seed)
    if not frozen_base.fits(saved_extra(checkpoint), model):
        start = cfg.init_from or f"the random weights of seed {cfg.seed}"
        raise UserError(f"{checkpoint} holds LoRA adapters trained on other weights than "
                        f"{start} holds now; restore the base the run trained on")
    unexpected = model.load_state_dict(adapters, strict=False).unexpected_keys
    if unexpected:
        raise UserError(f"{checkpoint} holds {unexpected[0]}, which the LoRA model its run's "
                        "config describes has not; was the run's config edited after "
                        "training? restore it and try again")
    return model
