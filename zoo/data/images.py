"""Labelled images for classification: an ImageNet-style folder (or a Hub dataset) read
per batch, resized and normalised like Hugging Face's ViT processor.

    DIR/train/<class>/*.JPEG   DIR/val/<class>/*.JPEG      (read with datasets' imagefolder)

Images are decoded per batch (the dataset is never loaded whole), resized to the model's
square size and normalised with mean = std = 0.5 (Hugging Face ViT's preprocessing). Global
batch `i` is a pure function of `i` (seeded epoch order, as for tokens), and each host decodes
only its rows of it, so resuming is exact.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import torch

from core.data import EpochOrder, check_seed, host_rows
from core.errors import UserError
from core.inputs import host_batch_size
from zoo.data.patterns import default_image_folder

MEAN = STD = 0.5


@dataclasses.dataclass
class ImageDataConfig:
    # "default": the embedded pattern set (drawn by zoo/data/patterns.py); "synthetic": random
    # pixels; a local folder with train/ and val/ class folders; otherwise a Hub dataset name.
    source: str = "default"
    image_column: str = "image"
    label_column: str = "label"
    train_split: str = "train"
    eval_split: str = "validation"  # imagefolder calls the val/ folder "validation"
    shuffle_seed: int = 0

    def __post_init__(self):
        check_seed(self.shuffle_seed)


def load_splits(config: ImageDataConfig) -> dict:
    """{split name: datasets.Dataset} for the configured source."""
    return _load_splits(config.source)


@functools.cache  # resolving the config and opening the data read the same source
def _load_splits(source: str) -> dict:
    import datasets  # datasets

    if source == "default":
        return datasets.load_dataset("imagefolder", data_dir=str(default_image_folder()))
    if Path(source).is_dir():
        try:
            return datasets.load_dataset("imagefolder", data_dir=source)
        except Exception as error:  # no images, no class folders, unreadable files
            raise UserError(
                f"data.source {source} is not a folder of train/<class>/ and val/<class>/ "
                f"images ({type(error).__name__})"
            ) from None
    if Path(source).exists() or source.startswith((".", "/")):
        raise UserError(f"data.source {source} is not a folder of train/ and val/ images")
    try:
        return datasets.load_dataset(source)
    except Exception as error:  # offline, or no such dataset
        raise UserError(
            f"cannot load image dataset '{source}' ({type(error).__name__}); use a "
            "local folder with train/<class>/ and val/<class>/, or data.source=default"
        ) from None


def class_names(split, config: ImageDataConfig) -> list[str]:
    feature = split.features.get(config.label_column)
    if feature is None or not hasattr(feature, "names"):
        raise UserError(
            f"the dataset has no class-label column '{config.label_column}'; set "
            f"data.label_column (columns: {', '.join(split.column_names)})"
        )
    return list(feature.names)


def to_pixels(images, size: int) -> torch.Tensor:
    """PIL images -> float tensor [N, 3, size, size], normalised like HF's ViT processor."""
    from PIL import Image  # PIL

    arrays = [
        np.asarray(image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR))
        for image in images
    ]
    pixels = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255.0
    return (pixels - MEAN) / STD


class ImageData:
    """The training batches, and the validation split when there is one (None: synthetic)."""

    def __init__(self, train, val):
        self.train, self.val = train, val

    def batch(self, index: int) -> dict:
        return self.train.batch(index)


class ImageBatches:
    """This host's share of global training batches, or fixed-shape validation chunks."""

    def __init__(self, split, config: ImageDataConfig, image_size: int, global_batch: int,
                 process_index: int, process_count: int):
        self.split, self.config, self.size = split, config, image_size
        self.global_batch = global_batch
        self.rows = host_rows(process_index, host_batch_size(global_batch, process_count))
        self.order = EpochOrder(len(split), config.shuffle_seed)

    def _decode(self, indices) -> dict:
        records = self.split[[int(i) for i in indices]]
        return {
            "pixel_values": to_pixels(records[self.config.image_column], self.size),
            "labels": torch.tensor(records[self.config.label_column], dtype=torch.long),
        }

    def batch(self, index: int) -> dict:
        return self._decode(self.order.items(index * self.global_batch + self.rows))

    def eval_chunks(self):
        """The whole split in order, in global batches; the last is padded and masked."""
        for start in range(0, len(self.split), self.global_batch):
            positions = start + self.rows
            valid = positions < len(self.split)
            batch = self._decode(np.where(valid, positions, 0))
            yield {**batch, "mask": torch.from_numpy(valid)}


class SyntheticImages:
    """Random pixels and labels for benchmarks, seeded per global batch."""

    def __init__(self, config: ImageDataConfig, model_config, global_batch: int,
                 process_index: int, process_count: int):
        self.seed, self.model = config.shuffle_seed, model_config
        self.rows = host_rows(process_index, host_batch_size(global_batch, process_count))

    def batch(self, index: int) -> dict:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        shape = (self.model.num_channels, self.model.image_size, self.model.image_size)
        pixels = torch.randn(len(self.rows), *shape, generator=generator)
        labels = torch.randint(0, self.model.num_labels, (len(self.rows),), generator=generator)
        return {"pixel_values": pixels, "labels": labels}
