"""Hugging Face checkpoint folders in, for any family: find the folder (local, or the Hub
with a clear offline error), read its safetensors, load them into a model by exact name."""

from __future__ import annotations

import contextlib
import contextvars
import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from core.errors import UserError
from core.json_file import read_json_object
from core.store.checkpoint_reader import first_misfit

VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")  # one is enough
TOKENIZER_REMEDY = "save the tokenizer there again (tokenizer.save_pretrained(folder))"


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


def read_config(name_or_path: str, required: tuple[str | tuple[str, ...], ...] = ()) -> dict:
    """config.json of a local folder or Hub model, as a dict; each of `required` (the keys
    a family's weights' shapes are read from, where transformers would otherwise fill in
    its own default: an empty config.json is a 7B model; a tuple: names one key goes by)
    must be in it."""
    folder = local_dir(name_or_path)
    if not (folder / "config.json").is_file():
        raise UserError(f"{folder} has no config.json: not a Hugging Face checkpoint directory")
    try:
        config = json.loads((folder / "config.json").read_text())
    except ValueError as error:
        raise UserError(f"{folder}/config.json is damaged (not JSON: {error})") from None
    if not isinstance(config, dict):
        raise UserError(f"{folder}/config.json holds no model config")
    alternatives = [(names,) if isinstance(names, str) else names for names in required]
    missing = [names[0] for names in alternatives if not set(names) & set(config)]
    if missing:
        raise UserError(f"{folder}/config.json has no {', '.join(missing)}: the model's "
                        "architecture is read from it, never guessed; restore the folder's "
                        "config.json")
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


# Within `headers_only()`: read_safetensors gives meta tensors of the headers' shapes.
_HEADERS_ONLY = contextvars.ContextVar("headers_only", default=False)
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
                      "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
                      "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
                      "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn,
                      "F8_E5M2": torch.float8_e5m2}


@contextlib.contextmanager
def headers_only():
    """Inside, `read_safetensors` reads each file's header alone and gives meta tensors of
    its names, shapes and dtypes: a family's own loader run on a meta model checks that a
    checkpoint fits it (names, shapes, its renames and stacking) without reading a byte of
    its weights."""
    token = _HEADERS_ONLY.set(True)
    try:
        yield
    finally:
        _HEADERS_ONLY.reset(token)


def safetensors_header(file: Path) -> dict[str, dict]:
    """{tensor name: {"dtype", "shape", "data_offsets"}} of a safetensors file, read from its
    header alone; a file cut short (its tensors end past its size) or not safetensors is
    refused in one line naming it."""
    damaged = f"{file} is damaged (not a safetensors file); download it again"
    try:
        size = file.stat().st_size
        with open(file, "rb") as stream:
            length = int.from_bytes(stream.read(8), "little") if size >= 8 else 0
            if not 0 < length <= size - 8:
                raise UserError(damaged)
            header = json.loads(stream.read(length))
    except (ValueError, UnicodeDecodeError):
        raise UserError(damaged) from None
    except OSError as error:  # a folder in its place, a symlink loop, no permission
        raise UserError(f"{file} cannot be read ({error.strerror}); download it "
                        "again") from None
    if not isinstance(header, dict):
        raise UserError(damaged)
    header.pop("__metadata__", None)
    try:
        end = max((int(entry["data_offsets"][1]) for entry in header.values()), default=0)
        for entry in header.values():
            if entry["dtype"] not in SAFETENSORS_DTYPES or not all(
                    isinstance(n, int) and n >= 0 for n in entry["shape"]):
                raise UserError(damaged)
    except (KeyError, TypeError, IndexError, ValueError):
        raise UserError(damaged) from None
    if size < 8 + length + end:
        raise UserError(f"{file} is cut short ({size:,} of {8 + length + end:,} bytes); "
                        "download it again")
    return header


def safetensors_headers(folder: Path) -> dict[Path, dict[str, dict]]:
    """{file: its header} of every safetensors file of a checkpoint, each checked against
    its size (`safetensors_header`); a folder with none is refused."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UserError(f"{folder} has no *.safetensors weights")
    return {file: safetensors_header(file) for file in files}


def check_weights(folder: Path) -> None:
    """Every *.safetensors file in `folder` whole (its header against its size), and all of
    them within the host's available memory, before a model is built from them or lm-eval
    loads them: the kernel's OOM killer would end the load with no message."""
    from core import runtime

    files = sorted(folder.glob("*.safetensors"))
    for file in files:
        safetensors_header(file)
    needed, available = sum(f.stat().st_size for f in files), runtime.host_memory_available()
    if available is not None and needed > available:
        raise UserError(f"the weights in {folder} take {needed / 2**30:.1f} GiB, more than the "
                        f"{available / 2**30:.1f} GiB of host memory available here; use a "
                        "machine with more memory")


def check_tokenizer(folder: Path) -> None:
    """A tokenizer folder's JSON files parse as objects, and one with a
    tokenizer_config.json holds a vocabulary: transformers would otherwise fail deep inside,
    with a traceback or advice to install sentencepiece."""
    for name in ("tokenizer_config.json", "tokenizer.json"):
        if (folder / name).exists() or (folder / name).is_symlink():
            read_json_object(folder / name, TOKENIZER_REMEDY)
    if (folder / "tokenizer_config.json").is_file() and not any(
            (folder / name).is_file() for name in VOCABULARY_FILES):
        raise UserError(f"{folder} has no tokenizer.json (nor tokenizer.model, vocab.json): "
                        f"its tokenizer is incomplete; {TOKENIZER_REMEDY}")


def read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of a (possibly sharded, indexed) safetensors checkpoint (meta tensors
    inside `headers_only()`); every file's header is checked first."""
    headers = safetensors_headers(folder)
    state = {}
    for file, header in headers.items():
        if _HEADERS_ONLY.get():
            state.update({name: torch.empty(entry["shape"], device="meta",
                                            dtype=SAFETENSORS_DTYPES[entry["dtype"]])
                          for name, entry in header.items()})
            continue
        try:
            state.update(load_file(file))
        except SafetensorError as error:
            raise UserError(f"{file} is damaged ({error}); download it again") from None
    return state


def read_safetensor(folder: Path, name: str) -> torch.Tensor | None:
    """One tensor of a (possibly sharded) safetensors checkpoint, without reading the rest;
    None when no file holds it."""
    for file in sorted(folder.glob("*.safetensors")):
        if name in safetensors_header(file):
            with safe_open(str(file), "pt") as tensors:
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
