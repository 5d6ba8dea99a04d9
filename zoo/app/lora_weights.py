"""A LoRA run's model. Its checkpoints hold the adapters alone (core/store/checkpoint.py);
the model it trained is its base, loaded again from where the run started (`init_from`, or
the seed of a random start) and checked against the fingerprint the checkpoint saved, with
the adapters folded in."""

from __future__ import annotations

import torch

from core import lora
from core.errors import UserError
from core.store.checkpoint import BASE_FINGERPRINT, saved_extra
from zoo.app.init_from import starting_point
from zoo.app.run import Run


def adapted_model(run: Run, checkpoint: str, adapters: dict) -> torch.nn.Module:
    """The run's model on the host with the checkpoint's adapters (`adapters`: its weights),
    unmerged, as it trained."""
    cfg = run.config
    model = run.family.build(cfg.model, seed=cfg.seed)
    if cfg.init_from:
        starting_point(cfg.init_from, cfg.model_name).load(model)
    lora.add_adapters(model, cfg.lora, seed=cfg.seed)
    if not lora.same_fingerprint(saved_extra(checkpoint).get(BASE_FINGERPRINT, {}),
                                 lora.fingerprint(model)):
        start = cfg.init_from or f"the random weights of seed {cfg.seed}"
        raise UserError(f"{checkpoint} holds LoRA adapters trained on other weights than "
                        f"{start} holds now; restore the base the run trained on")
    unexpected = model.load_state_dict(adapters, strict=False).unexpected_keys
    if unexpected:
        raise UserError(f"{checkpoint} holds {unexpected[0]}, which the LoRA model its run's "
                        "config describes has not; was the run's config edited after "
                        "training? restore it and try again")
    return model


def merged_weights(run: Run, checkpoint: str, adapters: dict) -> dict[str, torch.Tensor]:
    """The full weights of the model the run trained: base and adapters merged."""
    model = adapted_model(run, checkpoint, adapters)
    return lora.merged(model.state_dict(), run.config.lora.scale)
