"""`zoo train --init-from X`: the weights a run starts from, resolved once. X is a zoo run
folder or checkpoint (its newest weights), or a Hugging Face folder or Hub name (its
safetensors). Either brings its architecture, and the tokenizer its weights were trained
with, which the run then uses unless it names another (`data.tokenizer`): the token ids
of pretrained weights mean nothing under another tokenizer.

    zoo train --init-from runs/llama-tiny task=sft        # the family is the run's
    zoo train --init-from ~/Qwen-like-llama task=sft      # the family from config.json
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from core.errors import UserError
from core.hf import check_architecture, local_dir, read_config
from zoo.registry import ModelFamily, family_for_hf_architecture, resolve

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


@dataclasses.dataclass(frozen=True)
class StartingPoint:
    """Where the weights come from and what comes with them."""

    source: str  # as the user gave it
    family: ModelFamily
    zoo_run: bool  # a zoo run or checkpoint, else a Hugging Face folder
    model_name: str  # a zoo model name of that family (its architecture is `model`)
    model: object  # the family's model config the weights fit
    tokenizer: str | None  # the tokenizer the weights were trained with, if known

    def apply(self, config):
        """The run config with the starting point's architecture and (unless the run names
        another) its tokenizer."""
        config = dataclasses.replace(config, model=self.model)
        data = getattr(config, "data", None)
        if self.tokenizer and getattr(data, "tokenizer", None) == "default":
            config = dataclasses.replace(
                config, data=dataclasses.replace(data, tokenizer=self.tokenizer))
        return config

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
    """What `--init-from source` starts from; `model_name` (None: the source's own) must be
    of the source's family."""
    found = _from_zoo_run(source) if _is_zoo_run(source) else _from_hf(source, model_name)
    own = found.model_name if found.zoo_run else found.family.name
    if model_name and own not in (model_name, model_name.partition("-")[0]):
        raise UserError(f"--init-from {source} holds a {own} model, not {model_name}; name "
                        "no model (the starting point's own) or its own")
    return found


def _is_zoo_run(source: str) -> bool:
    from zoo.app.saved_run import is_saved_run

    return is_saved_run(source)


def _from_zoo_run(source: str) -> StartingPoint:
    from zoo.app.saved_run import load_run

    run = load_run(source)[0]
    tokenizer = getattr(getattr(run.config, "data", None), "tokenizer", None)
    return StartingPoint(source, run.family, True, run.model_name, run.config.model, tokenizer)


def _from_hf(source: str, model_name: str | None) -> StartingPoint:
    """The family is the named model's (whose class the folder must hold), else the one
    whose class config.json names."""
    if source.startswith((".", "/", "~")) and not Path(source).expanduser().exists():
        raise UserError(f"--init-from {source}: no such folder; give a zoo run folder or "
                        "checkpoint, or a Hugging Face folder or Hub name")
    architectures = read_config(source).get("architectures") or []
    if model_name:
        family = resolve(model_name)[0]
    elif architectures:
        family = family_for_hf_architecture(architectures[0])
    else:
        raise UserError(f"{source}/config.json names no architecture (architectures); name "
                        "the model to start it as (zoo train MODEL --init-from ...)")
    if family.load_hf is None:
        raise UserError(f"{family.name} cannot load Hugging Face checkpoints (--init-from)")
    check_architecture(source, family.hf_class)
    folder = local_dir(source)
    tokenizer = str(folder) if any((folder / f).is_file() for f in TOKENIZER_FILES) else None
    # a name for the run (the architecture is config.json's): the one given, else a size's
    name = model_name or f"{family.name}-{next(iter(family.sizes))}"
    return StartingPoint(source, family, False, name, family.config_from_hf(source), tokenizer)


def default_out(source: str, task: str | None) -> str:
    """The run folder of a run named by its starting point: runs/<its name>-<task>."""
    return f"runs/{Path(source.rstrip('/')).name}-{task or 'tuned'}"


def model_weights(source: str) -> tuple[str, dict]:
    """(the checkpoint folder read, the model's full weights) of a zoo run or checkpoint. A
    LoRA run's checkpoints hold its adapters alone (core/store/checkpoint.py): its model is
    its base, loaded again from where the run started, with the adapters merged in."""
    from core import lora  # torch
    from zoo.app.saved_run import load_run, newest_weights  # torch, the checkpoint readers

    checkpoint, weights = newest_weights(source)
    run = load_run(source)[0]
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
