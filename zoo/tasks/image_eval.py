"""`zoo eval` for image classifiers: top-1 of an exported Hugging Face folder on an image
folder's validation split (default: the embedded pattern set), on the host CPU with
transformers, so it checks the export as users will load it."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from tqdm import tqdm

from core.errors import UserError
from zoo.data.images import ImageDataConfig, load_splits, to_pixels


def evaluate(checkpoint: Path, folder: Path, options: dict) -> tuple[list[tuple], dict]:
    from transformers import AutoModelForImageClassification  # transformers

    if options.get("device", "cpu") != "cpu":
        raise UserError("image classifiers are evaluated on the host CPU; use --device cpu")
    data = ImageDataConfig(source=options.get("data") or "default")
    split = load_splits(data)[data.eval_split]
    if options.get("limit"):
        split = split.select(range(min(options["limit"], len(split))))
    model = AutoModelForImageClassification.from_pretrained(folder).eval()
    names = split.features[data.label_column].names
    trained = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if names != trained:
        raise UserError(f"the data's classes {names} are not the model's {trained}")
    size, batch_size = model.config.image_size, options.get("batch_size") or 8
    correct = 0
    with torch.no_grad():
        for start in tqdm(range(0, len(split), batch_size), desc="top-1", unit="batch"):
            records = split[start : start + batch_size]
            logits = model(pixel_values=to_pixels(records[data.image_column], size)).logits
            labels = torch.tensor(records[data.label_column])
            correct += int((logits.argmax(-1) == labels).sum())
    top1 = correct / len(split)
    stderr = math.sqrt(top1 * (1 - top1) / len(split))
    task = f"top1:{data.source}:{data.eval_split}"
    record = {"data": data.source, "split": data.eval_split, "examples": len(split),
              "top1": top1, "top1_stderr": stderr}
    return [(task, "acc", top1, stderr)], record
