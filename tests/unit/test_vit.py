"""ViT on the host: the FLOPs formula, the image pipeline, and a bad image source."""

import pytest
import torch

from tests.support.runs import zoo
from zoo.data.images import ImageBatches, ImageDataConfig, load_splits
from zoo.vit.family import forward_flops


def test_flops_count_patch_embedding_layers_and_classifier():
    """ViT-B/16 at 224 px: ~17.6 GFLOPs forward per image (the commonly quoted figure)."""
    from zoo.app.run import resolve_run

    run = resolve_run("vit-b16", ["data.source=synthetic"]).config
    assert forward_flops(run) == pytest.approx(2 * 17.56e9, rel=0.02)  # 2 FLOPs per MAC
    assert forward_flops(run, causal=False) == forward_flops(run)


def test_image_batches_are_deterministic_and_split_over_hosts():
    split = load_splits(ImageDataConfig())["train"]
    whole = ImageBatches(split, ImageDataConfig(), 32, 8, 0, 1)
    halves = [ImageBatches(split, ImageDataConfig(), 32, 8, k, 2) for k in (0, 1)]
    again = ImageBatches(split, ImageDataConfig(), 32, 8, 0, 1).batch(5)
    assert torch.equal(whole.batch(5)["pixel_values"], again["pixel_values"])
    joined = torch.cat([h.batch(5)["labels"] for h in halves])
    assert torch.equal(joined, whole.batch(5)["labels"])
    assert whole.batch(5)["pixel_values"].shape == (8, 3, 32, 32)
    chunks = list(whole.eval_chunks())
    assert sum(int(c["mask"].sum()) for c in chunks) == len(split)


def test_bad_image_source_is_one_line(tmp_path):
    result = zoo("train", "vit-tiny", "--tpu", "cpu-1", "--out", str(tmp_path / "r"),
                 f"data.source={tmp_path / 'missing'}")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "is not a folder of train/ and val/ images" in result.stderr
