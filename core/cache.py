"""zoo's cache on this machine's disk, shared by whatever keeps a file between runs (a run
folder's local copy, the measured CPU peak, tokenized data)."""

import os
from pathlib import Path


def cache_home() -> Path:
    """zoo's cache on this machine's disk: $ZOO_CACHE, else ~/.cache/zoo."""
    return Path(os.environ.get("ZOO_CACHE") or Path.home() / ".cache" / "zoo").expanduser()
