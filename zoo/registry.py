"""The model zoo: one line per family. A family module exposes `FAMILY` (a ModelFamily);
models are named `<family>-<size>`, e.g. llama-1b.

Families outside this repo register through the environment, without editing this file:
ZOO_FAMILIES="mynet=my_pkg.mynet.family,other=..." (modules importable from PYTHONPATH)."""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable
from pathlib import Path

from core.errors import UserError

FAMILIES = {
    "llama": "zoo.llama.family",
    "t5": "zoo.t5.family",
    "vit": "zoo.vit.family",
}


def _external_families(spec: str) -> dict[str, str]:
    pairs = [item.partition("=") for item in spec.split(",") if item.strip()]
    if any(not name or not module for name, _, module in pairs):
        raise UserError(f"ZOO_FAMILIES='{spec}' must look like name=package.module,name2=...")
    return {name.strip(): module.strip() for name, _, module in pairs}


FAMILIES.update(_external_families(os.environ.get("ZOO_FAMILIES", "")))


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """Everything the shared runtime, bench, plan, export and the conformance suite need to
    know about a family. Field order: required first, Hugging Face interop last (optional)."""

    name: str
    config_cls: type  # dataclass of architecture hyper-parameters
    sizes: dict  # size name -> config instance; "tiny" is the one the tests train
    build: Callable  # (config, init=True, seed=0) -> nn.Module (weights initialised)
    train_config_cls: type  # dataclass schema of everything else in a training run
    trainer_cls: type  # core.trainer.Trainer subclass
    presets_dir: Path  # holds sharding/*.yaml and remat/*.yaml
    # The callables below take a run config (train_config_cls + `model`: the architecture).
    # (run, causal=True) -> forward matmul FLOPs per item, where an item is the trainer's
    # throughput unit (a token for LMs, an example for a classifier)
    forward_flops: Callable
    # (run, batch_per_device, tensor, remat, bytes_per_value, on_tpu) -> {term: bytes/device}
    activation_bytes: Callable
    # (run, seed=0) -> a host batch of run.global_batch_size examples in the trainer's format
    example_batch: Callable
    hf_class: str | None = None  # transformers class an export loads as
    hf_config: Callable | None = None  # model config -> transformers PretrainedConfig
    config_from_hf: Callable | None = None  # hf_dir -> model config
    load_hf: Callable | None = None  # (model, hf_dir) -> None: load HF weights into the model
    # (run config, hf config, folder) -> None: tokenizer / image processor / generation files
    write_hf_extras: Callable | None = None
    # How `zoo eval` scores an exported folder: lm-eval's hf backend with this
    # AutoModel kind ("causal" or "seq2seq"), or the family's own `evaluate`.
    lm_eval_backend: str | None = None
    # (checkpoint path, HF folder, options: dict) -> (rows of (task, metric, value, stderr),
    # JSON-able record)
    evaluate: Callable | None = None

    def preset(self, kind: str, name: str) -> Path:
        path = self.presets_dir / kind / f"{name}.yaml"
        if not path.is_file():
            names = sorted(p.stem for p in (self.presets_dir / kind).glob("*.yaml"))
            raise UserError(
                f"{self.name} has no {kind} preset '{name}'; presets: {', '.join(names)}"
            )
        return path


def family(name: str) -> ModelFamily:
    return importlib.import_module(FAMILIES[name]).FAMILY


def model_names() -> list[str]:
    return [f"{fam}-{size}" for fam in FAMILIES for size in family(fam).sizes]


def resolve(model_name: str) -> tuple[ModelFamily, str]:
    """'llama-1b' -> (llama family, '1b'); unknown names list the valid ones."""
    fam_name, _, size = model_name.partition("-")
    if fam_name in FAMILIES and size in family(fam_name).sizes:
        return family(fam_name), size
    raise UserError(f"unknown model '{model_name}'; valid: {', '.join(model_names())}")


def family_for_hf_architecture(architecture: str) -> ModelFamily:
    """The family an exported Hugging Face folder (config.json `architectures`) belongs to."""
    for name in FAMILIES:
        if family(name).hf_class == architecture:
            return family(name)
    known = ", ".join(family(name).hf_class for name in FAMILIES if family(name).hf_class)
    raise UserError(f"no zoo model family for Hugging Face class {architecture}; known: {known}")


def parameter_count(fam: ModelFamily, size: str) -> int:
    """Parameters of a size, counted on the meta device (nothing allocated)."""
    import torch

    with torch.device("meta"):
        model = fam.build(fam.sizes[size], init=False)
    return sum(p.numel() for p in model.parameters())
