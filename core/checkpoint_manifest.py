"""What a checkpoint held when it was committed, so a damaged one (a bad disk, a killed copy)
is found before it is read: `manifest.json` lists every file's size, and the CRC-32 of every
file up to CHECKSUM_LIMIT (metadata, optimizer groups, RNG states, the shards of all but large
models). Checking is cheap: a stat per file and a read of the small ones."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

MANIFEST = "manifest.json"
CHECKSUM_LIMIT = 64 * 2**20  # bytes; larger files are checked by size


def write_manifest(folder: Path) -> None:
    """Record every file under `folder` (written last, once all writers have finished)."""
    entries = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        size = path.stat().st_size
        entry = {"size": size}
        if size <= CHECKSUM_LIMIT:
            entry["crc32"] = _crc32(path)
        entries[str(path.relative_to(folder))] = entry
    (folder / MANIFEST).write_text(json.dumps(entries, indent=1, sort_keys=True))


def damage(folder: Path) -> str | None:
    """None if `folder` holds what its manifest lists (or has no manifest: an older
    checkpoint), else what is wrong, naming the file."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return None
    try:
        entries = json.loads(manifest.read_text())
    except ValueError:
        return f"{MANIFEST} is not readable"
    for name, entry in entries.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != entry["size"]:
            return f"{name} is {size:,} bytes, {entry['size']:,} when saved"
        if "crc32" in entry and _crc32(path) != entry["crc32"]:
            return f"{name} does not match its checksum"
    return None


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as file:
        while chunk := file.read(2**20):
            crc = zlib.crc32(chunk, crc)
    return crc
