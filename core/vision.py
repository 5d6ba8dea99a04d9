"""Image classification on top of the generic trainer: an ImageNet-style folder (or a Hub
dataset) in, cross entropy out, validation top-1 during training.

    DIR/train/<class>/*.JPEG   DIR/val/<class>/*.JPEG      (read with datasets' imagefolder)

Images are decoded per batch (the dataset is never loaded whole), resized to the model's
square size and normalised with mean = std = 0.5 (Hugging Face ViT's preprocessing). Global
batch `i` is a pure function of `i` (seeded epoch order, as for tokens), and each host decodes
only its rows of it, so resuming is exact.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from core.data import EpochOrder, host_rows
from core.errors import UserError
from core.inputs import host_batch_size
from core.optim import OptimConfig
from core.trainer import TrainConfig, Trainer

MEAN = STD = 0.5


@dataclasses.dataclass
class ImageDataConfig:
    # "default": the embedded pattern set (drawn by core/patterns.py); "synthetic": random
    # pixels; a local folder with train/ and val/ class folders; otherwise a Hub dataset name.
    source: str = "default"
    image_column: str = "image"
    label_column: str = "label"
    train_split: str = "train"
    eval_split: str = "validation"  # imagefolder calls the val/ folder "validation"
    shuffle_seed: int = 0


@dataclasses.dataclass
class ImageTrainConfig(TrainConfig):
    global_batch_size: int = 32
    # Small ViTs from scratch want a higher peak lr than the LM default.
    optim: OptimConfig = dataclasses.field(default_factory=lambda: OptimConfig(lr=1e-3))
    eval_every: int = 20  # steps between validation passes (and at the end); 0: never
    data: ImageDataConfig = dataclasses.field(default_factory=ImageDataConfig)


def load_splits(config: ImageDataConfig) -> dict:
    """{split name: datasets.Dataset} for the configured source."""
    import datasets

    if config.source == "default":
        from core.patterns import default_image_folder

        return datasets.load_dataset("imagefolder", data_dir=str(default_image_folder()))
    if Path(config.source).is_dir():
        return datasets.load_dataset("imagefolder", data_dir=config.source)
    if Path(config.source).exists() or config.source.startswith((".", "/")):
        raise UserError(f"data.source {config.source} is not a folder of train/ and val/ images")
    try:
        return datasets.load_dataset(config.source)
    except Exception as error:  # offline, or no such dataset
        raise UserError(
            f"cannot load image dataset '{config.source}' ({type(error).__name__}); use a "
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
    from PIL import Image

    arrays = [
        np.asarray(image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR))
        for image in images
    ]
    pixels = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255.0
    return (pixels - MEAN) / STD


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


class ImageClassificationTrainer(Trainer):
    throughput_unit = "examples"

    @classmethod
    def prepare(cls, config: ImageTrainConfig) -> dict:
        """Load the dataset; the class names become the model's labels."""
        if config.data.source == "synthetic":
            return {"splits": None}
        splits = load_splits(config.data)
        for split in (config.data.train_split, config.data.eval_split):
            if split not in splits:
                raise UserError(
                    f"the image dataset has no '{split}' split (it has: {', '.join(splits)}); "
                    "set data.train_split / data.eval_split"
                )
        names = class_names(splits[config.data.train_split], config.data)
        if config.init_from and len(names) != config.model.num_labels:
            raise UserError(
                f"--init-from has {config.model.num_labels} classes but the data has "
                f"{len(names)}; use a checkpoint trained on these classes"
            )
        config.model.num_labels, config.model.labels = len(names), names
        return {"splits": splits}

    def __init__(self, config: ImageTrainConfig, model, rules, remat, *, splits, **kwargs):
        import torch_xla.runtime as xr

        super().__init__(config, model, rules, remat, **kwargs)
        where = (config.global_batch_size, xr.process_index(), xr.process_count())
        size = model.config.image_size
        if splits is None:
            self.data, self.eval_data = SyntheticImages(config.data, model.config, *where), None
        else:
            self.data = ImageBatches(splits[config.data.train_split], config.data, size, *where)
            self.eval_data = ImageBatches(splits[config.data.eval_split], config.data, size,
                                          *where)

    @staticmethod
    def loss(model, batch):
        logits = model(batch["pixel_values"])
        labels = batch["labels"]
        accuracy = (logits.argmax(-1) == labels).float().mean()
        return F.cross_entropy(logits.float(), labels), {"accuracy": accuracy}

    def host_batches(self, start: int):
        index = start
        while True:
            yield self.data.batch(index)
            index += 1

    @staticmethod
    def items_per_step(config: ImageTrainConfig) -> int:
        return config.global_batch_size

    def after_step(self, step: int) -> dict | None:
        every = self.config.eval_every
        if self.eval_data is None or not every or (step % every and step != self.config.steps):
            return None
        return {"val_top1": self.validate()}

    def validate(self) -> float:
        """Top-1 over the whole validation split; one compiled eval graph (fixed shapes)."""
        import torch_xla

        from core.inputs import device_loader

        chunks = self.eval_data.eval_chunks()
        first = next(self.eval_data.eval_chunks())
        correct = []
        with torch.no_grad():
            for chunk in device_loader(chunks, self.mesh, first):
                with self._autocast():
                    logits = self.model(chunk["pixel_values"])
                hits = (logits.argmax(-1) == chunk["labels"]) & chunk["mask"]
                correct.append(hits.sum())
                torch_xla.sync()
        return sum(int(c) for c in correct) / len(self.eval_data.split)
