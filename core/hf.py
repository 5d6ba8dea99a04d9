"""Hugging Face checkpoint folders in, for any family: find the folder (local, or the Hub
with a clear offline error), read its safetensors, load them into a model by exact name."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from core.errors import UserError
from core.store.checkpoint_reader import first_misfit


def local_dir(name_or_path: str) -> Path:
    """A local HF folder as is; a Hub name is downloaded (fails early and clearly offline)."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if path.exists() or name_or_path.startswith((".", "/")):
        raise UserError(f"{name_or_path} is not a Hugging Face checkpoint directory")
    from huggingface_hub import snapshot_download  # huggingface_hub

    try:
        return Path(snapshot_download(name_or_path, allow_patterns=["*.json", "*.safetensors"]))
    except Exception as error:  # offline, gated, or no such repo
        raise UserError(
            f"cannot fetch '{name_or_path}' from the Hugging Face Hub "
            f"({type(error).__name__}); pass a local checkpoint directory"
        ) from None


def read_config(name_or_path: str) -> dict:
    """config.json of a local folder or Hub model, as a dict."""
    folder = local_dir(name_or_path)
    if not (folder / "config.json").is_file():
        raise UserError(f"{folder} has no config.json: not a Hugging Face checkpoint directory")
    try:
        config = json.loads((folder / "config.json").read_text())
    except ValueError as error:
        raise UserError(f"{folder}/config.json is damaged (not JSON: {error})") from None
    if not isinstance(config, dict):
        raise UserError(f"{folder}/config.json holds no model config")
    return config


def check_architecture(name_or_path: str, expected: str) -> None:
    """Refuse a checkpoint of another architecture before its config is read as ours (a
    BertModel read as a Llama gets Llama's defaults: a 7B model built on the host)."""
    found = read_config(name_or_path).get("architectures") or []
    if found and expected not in found:
        raise UserError(f"{name_or_path} holds a {', '.join(found)} checkpoint; this model "
                        f"starts from {expected} checkpoints")


def misfit(hf_class: str, hf_config, weights: dict[str, torch.Tensor]) -> str | None:
    """Why transformers' `hf_class` built from `hf_config` would not load `weights` (the
    first tensor that does not fit, in words), None when it would. The model is built on
    the meta device: nothing is allocated."""
    import transformers  # transformers

    with torch.device("meta"):
        model = getattr(transformers, hf_class)(hf_config)
    return first_misfit({k: list(v.shape) for k, v in model.state_dict().items()},
                        {k: list(v.shape) for k, v in weights.items()},
                        required=set(dict(model.named_parameters())))


def read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of a (possibly sharded, indexed) safetensors checkpoint."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UserError(f"{folder} has no *.safetensors weights")
    state = {}
    for file in files:
        state.update(load_file(file))
    return state


def read_safetensor(folder: Path, name: str) -> torch.Tensor | None:
    """One tensor of a (possibly sharded) safetensors checkpoint, without reading the rest;
    None when no file holds it."""
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), "pt") as tensors:
            if name in tensors.keys():
                return tensors.get_tensor(name)
    return None


def load_state(model, state: dict[str, torch.Tensor], source: str) -> None:
    """Copy `state` into `model` in fp32; names and shapes must match exactly."""
    expected = {name: p.shape for name, p in model.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [n for n in expected if n in state and state[n].shape != expected[n]]
    if missing or unexpected or wrong:
        name = (missing or unexpected or wrong)[0]
        kind = "missing" if missing else "unexpected" if unexpected else "of the wrong shape"
        raise UserError(f"checkpoint {source} does not fit the model: '{name}' is {kind}")
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()}, strict=True)
