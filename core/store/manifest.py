"""What a checkpoint held when it was committed, so a damaged one (a bad disk, a killed copy)
is found before it is read: `manifest.json` lists every file's size, and the CRC-32 of every
file up to CHECKSUM_LIMIT (metadata, optimizer groups, RNG states, the shards of all but large
models). Checking is cheap: a listing and a read of the small files.

The manifest is also the commit marker: it is written last, once every writer has finished,
so a checkpoint folder without one is a save in progress or a crashed one (object stores
cannot rename a folder into place)."""

from __future__ import annotations

import json
import zlib

from core.json_file import DamagedFile, json_object
from core.store.location import Store

MANIFEST = "manifest.json"
CHECKSUM_LIMIT = 64 * 2**20  # bytes; larger files are checked by size


def write_manifest(folder: Store) -> None:
    """Record every file under `folder`, committing it."""
    entries = {}
    for name, size in sorted(folder.files().items()):
        if name == MANIFEST:
            continue
        entry = {"size": size}
        if size <= CHECKSUM_LIMIT:
            entry["crc32"] = _crc32(folder, name)
        entries[name] = entry
    folder.write_text(MANIFEST, json.dumps(entries, indent=1, sort_keys=True))


def is_committed(folder: Store) -> bool:
    return folder.exists(MANIFEST)


def damage(folder: Store) -> str | None:
    """None if `folder` holds what its manifest lists, else what is wrong, naming the file."""
    try:
        entries = json_object(folder.read_text(MANIFEST), MANIFEST, "")
    except FileNotFoundError:
        return f"{MANIFEST} is missing"
    except (DamagedFile, OSError, UnicodeDecodeError):  # not JSON, not text, not a file
        return f"{MANIFEST} is not readable"
    sizes = folder.files()
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("size"), int):
            return f"{MANIFEST} is not readable (entry {name!r})"
        if name not in sizes:
            return f"{name} is missing"
        if sizes[name] != entry["size"]:
            return f"{name} is {sizes[name]:,} bytes, {entry['size']:,} when saved"
        if "crc32" in entry and _crc32(folder, name) != entry["crc32"]:
            return f"{name} does not match its checksum"
    return None


def _crc32(folder: Store, name: str) -> int:
    crc = 0
    with folder.open(name) as file:
        while chunk := file.read(2**20):
            crc = zlib.crc32(chunk, crc)
    return crc
