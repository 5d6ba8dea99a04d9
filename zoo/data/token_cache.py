"""Tokenized corpora on disk: tokenize a source once, then memory-map it at every later start.

A restart after preemption, or another host sharing the cache folder, opens the tokens in
milliseconds whatever the corpus size, instead of reading and tokenizing every document
again; only the pages of the rows a host reads are ever loaded.

    CACHE/tokens/KEY.npy    the int32 token stream (numpy format, memory-mapped when read)
    CACHE/tokens/KEY.json   documents, label and largest token id of the stream

CACHE is `data.cache_dir`, else $ZOO_CACHE, else ~/.cache/zoo. KEY hashes everything the
tokens depend on (the caller's parts: source, files' sizes and times, tokenizer vocabulary).
Both files are written under temporary names and renamed, the token file last, so a killed
tokenization leaves nothing that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

from core.cache import cache_home
from core.errors import UserError


def cache_root(configured: str | None) -> Path:
    return (Path(configured).expanduser() if configured else cache_home()) / "tokens"


def cache_key(parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def load(root: Path, key: str) -> tuple[np.ndarray, dict] | None:
    """(memory-mapped tokens, their metadata), or None when not cached; a damaged entry
    (a disk that filled up, a copy cut short) is reported and tokenized again."""
    tokens, meta = root / f"{key}.npy", root / f"{key}.json"
    if not (tokens.is_file() and meta.is_file()):
        return None
    try:
        return np.load(tokens, mmap_mode="r"), json.loads(meta.read_text())
    except (ValueError, OSError, EOFError) as error:
        print(f"warning: the token cache {root / key}.* is damaged ({error}); tokenizing again",
              file=sys.stderr)
        return None


def store(root: Path, key: str, tokens: np.ndarray, meta: dict) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot write the token cache at {root} ({error.strerror}); set "
                        "data.cache_dir or $ZOO_CACHE to a writable folder") from None
    suffix = f".tmp-{os.getpid()}"
    meta_tmp, tokens_tmp = root / f"{key}.json{suffix}", root / f"{key}.npy{suffix}"
    meta_tmp.write_text(json.dumps(meta))
    with open(tokens_tmp, "wb") as f:
        np.save(f, tokens)
    os.replace(meta_tmp, root / f"{key}.json")
    os.replace(tokens_tmp, root / f"{key}.npy")  # last: its presence means complete
