"""A Hugging Face model folder checked before a model is built from it or lm-eval loads it:
its weights' headers against their sizes, its tokenizer's files as JSON. A damaged file is
named in one line; transformers and lm-eval would otherwise fail deep inside, with a
traceback or advice to install sentencepiece."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from core.errors import UserError
from core.json_file import read_json_object

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")  # one is enough
WEIGHTS_REMEDY = "copy or export the model folder again"
TOKENIZER_REMEDY = "save the tokenizer there again (tokenizer.save_pretrained(folder))"


def check_weights(folder: Path) -> None:
    """Every *.safetensors file in `folder` holds the bytes its header describes."""
    for file in sorted(folder.glob("*.safetensors")):
        problem = _safetensors_problem(file)
        if problem:
            raise UserError(f"{file} {problem}; {WEIGHTS_REMEDY}")


def check_tokenizer(folder: Path) -> None:
    """A tokenizer folder's JSON files parse as objects, and it holds a vocabulary (once it
    has a tokenizer_config.json: one without is refused by the caller, naming why)."""
    for name in ("tokenizer_config.json", "tokenizer.json"):
        if (folder / name).exists() or (folder / name).is_symlink():
            read_json_object(folder / name, TOKENIZER_REMEDY)
    if (folder / "tokenizer_config.json").is_file() and not any(
            (folder / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(f"{folder} has no tokenizer.json (nor tokenizer.model, vocab.json): "
                        f"its tokenizer is incomplete; {TOKENIZER_REMEDY}")


def _safetensors_problem(file: Path) -> str | None:
    """Why `file` is not a whole safetensors file, in words; None when it is."""
    try:
        size = file.stat().st_size
        if file.is_dir():
            return "is a folder, not a weights file"
        with open(file, "rb") as stream:
            prefix = stream.read(8)
            if len(prefix) < 8:
                return f"is {size} bytes: cut short before its header"
            (length,) = struct.unpack("<Q", prefix)
            if 8 + length > size:
                return f"is {size:,} bytes, less than its {length:,}-byte header: cut short"
            header = json.loads(stream.read(length))
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    except (ValueError, UnicodeDecodeError):
        return "has no safetensors header (not a weights file)"
    if not isinstance(header, dict):
        return "has no safetensors header (not a weights file)"
    ends = [entry.get("data_offsets", [0, 0])[1] for name, entry in header.items()
            if name != "__metadata__" and isinstance(entry, dict)]
    expected = 8 + length + max(ends, default=0)
    if expected != size:
        return f"is {size:,} bytes, {expected:,} by its header: cut short or damaged"
    return None
