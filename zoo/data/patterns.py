"""The embedded default image set: an ImageNet-style folder of drawn patterns, made by the
project (no download), so `zoo train vit-tiny` runs on a fresh machine and visibly learns.

    patterns-v1/train/<class>/<n>.png   256 per class
    patterns-v1/val/<class>/<n>.png     32 per class

Six classes of patterns (checkerboard, a disc, diagonal / horizontal / vertical stripes,
dots), light on dark in random colours, with random period, phase and position and pixel
noise; seeded, so every machine gets the same images. Written once into the cache and
reused.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

NAME = "patterns-v1"
CLASSES = ("checker", "circle", "diagonal", "dots", "stripes_h", "stripes_v")
SIZE = 32
PER_CLASS = {"train": 256, "val": 32}


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "zoo" / "images"


def default_image_folder() -> Path:
    """The folder, drawn on first use (atomically: a partial folder is never used)."""
    target = cache_root() / NAME
    if target.is_dir():
        return target
    tmp = target.with_name(f"{NAME}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    rng = random.Random(0)
    for split, count in PER_CLASS.items():
        for label in CLASSES:
            folder = tmp / split / label
            folder.mkdir(parents=True)
            for n in range(count):
                draw(label, rng).save(folder / f"{n:03d}.png")
    try:
        tmp.rename(target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def draw(label: str, rng: random.Random):
    from PIL import Image, ImageDraw  # PIL

    background = tuple(rng.randrange(0, 100) for _ in range(3))  # dark
    ink = tuple(rng.randrange(156, 256) for _ in range(3))  # light: always visible
    image = Image.new("RGB", (SIZE, SIZE), background)
    pen = ImageDraw.Draw(image)
    period, phase = rng.randint(5, 9), rng.randrange(10)
    if label == "circle":
        radius = rng.randint(9, 14)
        cx, cy = rng.randint(radius, SIZE - radius), rng.randint(radius, SIZE - radius)
        pen.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=ink)
    elif label == "checker":
        for x in range(-phase, SIZE, period):
            for y in range(-phase, SIZE, period):
                if (x // period + y // period) % 2 == 0:
                    pen.rectangle((x, y, x + period - 1, y + period - 1), fill=ink)
    elif label == "dots":
        for x in range(phase % period, SIZE, period):
            for y in range(phase % period, SIZE, period):
                pen.ellipse((x - 1, y - 1, x + 1, y + 1), fill=ink)
    else:  # stripes: horizontal, vertical or diagonal lines
        width = rng.randint(1, 2)
        for offset in range(-SIZE + phase % period, 2 * SIZE, period):
            line = {
                "stripes_h": [(0, offset), (SIZE, offset)],
                "stripes_v": [(offset, 0), (offset, SIZE)],
                "diagonal": [(offset, 0), (offset + SIZE, SIZE)],
            }[label]
            pen.line(line, fill=ink, width=width)
    noise = Image.frombytes("L", (SIZE, SIZE), bytes(rng.randrange(256) for _ in range(SIZE**2)))
    return Image.blend(image, noise.convert("RGB"), 0.15)
