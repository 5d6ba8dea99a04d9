"""Image classification: labelled images in (zoo/data/images.py), cross entropy out,
validation top-1 during training, `zoo eval` top-1 of an export (zoo/tasks/image_eval.py)."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from core.errors import UserError
from core.mesh import check_divides
from core.optim import OptimConfig
from core.run_config import TrainConfig, one_row_per_device, setting
from core.task import Task
from zoo.data.images import (
    MEAN,
    STD,
    ImageBatches,
    ImageData,
    ImageDataConfig,
    SyntheticImages,
    class_names,
    load_splits,
)
from zoo.tasks.image_eval import evaluate


@dataclasses.dataclass
class ImageTrainConfig(TrainConfig):
    global_batch_size: int = setting(32, from_slice=one_row_per_device)
    # Small ViTs from scratch want a higher peak lr than the LM default.
    optim: OptimConfig = dataclasses.field(default_factory=lambda: OptimConfig(lr=1e-3))
    # steps between validation passes (and at the end); 0: never
    eval_every: int = setting(20, resumable=True)
    data: ImageDataConfig = dataclasses.field(default_factory=ImageDataConfig)

    def __post_init__(self):
        super().__post_init__()
        check_divides(self)


class ImageClassification(Task):
    name = "image-classification"
    config_cls = ImageTrainConfig
    unit = "examples"

    def resolve(self, config: ImageTrainConfig) -> ImageTrainConfig:
        """The dataset's class names become the model's labels."""
        if config.data.source == "synthetic":
            return config
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
        model = dataclasses.replace(config.model, num_labels=len(names), labels=names)
        return dataclasses.replace(config, model=model)

    def data(self, config: ImageTrainConfig, process_index: int, process_count: int):
        where = (config.global_batch_size, process_index, process_count)
        if config.data.source == "synthetic":
            return ImageData(SyntheticImages(config.data, config.model, *where), None)
        splits, size = load_splits(config.data), config.model.image_size
        return ImageData(
            ImageBatches(splits[config.data.train_split], config.data, size, *where),
            ImageBatches(splits[config.data.eval_split], config.data, size, *where),
        )

    def loss(self, model, batch):
        logits = model(batch["pixel_values"])
        labels = batch["labels"]
        accuracy = (logits.argmax(-1) == labels).float().mean()
        return F.cross_entropy(logits.float(), labels), {"accuracy": accuracy}

    def items_per_step(self, config: ImageTrainConfig) -> int:
        return config.global_batch_size

    def example_batch(self, config: ImageTrainConfig, seed: int = 0) -> dict:
        """Random normalised pixels and labels."""
        generator = torch.Generator().manual_seed(seed)
        c, rows = config.model, config.global_batch_size
        shape = (rows, c.num_channels, c.image_size, c.image_size)
        labels = torch.randint(0, c.num_labels, (rows,), generator=generator)
        return {"pixel_values": torch.randn(shape, generator=generator), "labels": labels}

    def write_hf_extras(self, config, hf_config, folder) -> None:
        """preprocessor_config.json with the resize and normalisation used in training."""
        from transformers import ViTImageProcessor  # transformers

        size = config.model.image_size
        ViTImageProcessor(
            size={"height": size, "width": size}, image_mean=[MEAN] * 3, image_std=[STD] * 3
        ).save_pretrained(folder)

    def evaluate(self, checkpoint, folder, options: dict) -> tuple[list[tuple], dict]:
        return evaluate(checkpoint, folder, options)

    def after_step(self, engine, step: int) -> dict | None:
        every = engine.config.eval_every
        if engine.data.val is None or not every or (step % every and step != engine.config.steps):
            return None
        return {"val_top1": validate(engine)}


def validate(engine) -> float:
    """Top-1 over the whole validation split; one compiled eval graph (fixed shapes)."""
    backend, val = engine.backend, engine.data.val
    correct = []
    with torch.no_grad():
        for chunk in backend.loader(val.eval_chunks(), engine.mesh, next(val.eval_chunks())):
            with engine.autocast():
                logits = backend.run(engine.model, chunk["pixel_values"])
            hits = (logits.argmax(-1) == chunk["labels"]) & chunk["mask"]
            correct.append(backend.total(hits.sum()))
            backend.sync()
    return sum(int(c) for c in correct) / len(val.split)


IMAGE_CLASSIFICATION = ImageClassification()
