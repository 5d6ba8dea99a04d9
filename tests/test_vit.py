"""ViT: parity with transformers' ViTForImageClassification (eager CPU and XLA:CPU, scan
on/off), every sharding x remat preset on 8 devices vs 1, the image pipeline, and
`zoo train` / `zoo export` / `zoo eval` end to end on the embedded pattern set."""

import json

import pytest
import torch
import transformers
import vit_cases
from family_presets import FamilyPresetTests
from test_train import kill_after_first_checkpoint_then_rerun, losses, trained_run, zoo
from vit_cases import CONFIG, batch

from zoo.tasks.images import ImageBatches, ImageDataConfig, load_splits
from zoo.vit.family import FAMILY, forward_flops
from zoo.vit.hf import load_hf

# fp32; eager CPU runs the same kernels as transformers.
EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}


@pytest.fixture(scope="module")
def reference():
    """transformers' logits, loss and gradients for the same weights and batch."""
    ours = FAMILY.build(CONFIG, seed=0)
    hf = transformers.ViTForImageClassification(CONFIG.to_hf()).eval()
    hf.load_state_dict(ours.state_dict(), strict=True)
    b = batch()
    out = hf(pixel_values=b["pixel_values"], labels=b["labels"])
    out.loss.backward()
    return {"loss": out.loss.detach(), "logits": out.logits.detach(),
            "grads": {n: p.grad for n, p in hf.named_parameters()}}


class TestPresets(FamilyPresetTests):
    cases = vit_cases
    eager_tol = EAGER_TOL

    def test_fsdp_tensor_layout_on_8_devices(self, xla_runs):
        specs = xla_runs[8]["results"][("fsdp_tensor", "none")]["specs"]
        # mesh fsdp=4 x tensor=2: column-parallel q_proj has tensor on its output rows.
        assert specs["vit.layers.0.attention.q_proj.weight"] == "{devices=[2,4]0,2,4,6,1,3,5,7}"
        assert specs["vit.layers.0.mlp.fc2.weight"] == "{devices=[4,2]0,1,2,3,4,5,6,7}"
        assert specs["vit.layernorm.weight"] == "{replicated}"


def test_transformers_4_checkpoints_load(tmp_path):
    """Hub checkpoints use the transformers 4 names (encoder.layer.N.attention.attention...)."""
    from safetensors.torch import save_file

    from zoo.vit.hf import LEGACY_NAMES

    hf = transformers.ViTForImageClassification(CONFIG.to_hf()).eval()
    hf.config.save_pretrained(tmp_path)
    old = {}
    for name, value in hf.state_dict().items():
        name = name.replace("vit.layers.", "vit.encoder.layer.")
        for current, legacy in ((".attention.q_proj.", ".attention.attention.query."),
                                (".attention.k_proj.", ".attention.attention.key."),
                                (".attention.v_proj.", ".attention.attention.value."),
                                (".attention.o_proj.", ".attention.output.dense."),
                                (".mlp.fc1.", ".intermediate.dense."),
                                (".mlp.fc2.", ".output.dense.")):
            name = name.replace(current, legacy)
        old[name] = value.contiguous()
    assert len(LEGACY_NAMES) == 7 and "vit.encoder.layer.0.attention.attention.query.weight" in old
    save_file(old, str(tmp_path / "model.safetensors"))
    model = FAMILY.build(FAMILY.config_from_hf(str(tmp_path)), init=False)
    load_hf(model, str(tmp_path))
    pixels = batch()["pixel_values"]
    with torch.no_grad():
        torch.testing.assert_close(model(pixels), hf(pixel_values=pixels).logits, **EAGER_TOL)


def test_flops_count_patch_embedding_layers_and_classifier():
    """ViT-B/16 at 224 px: ~17.6 GFLOPs forward per image (the commonly quoted figure)."""
    from zoo.compose import load_run_config

    _, run = load_run_config("vit-b16", ["data.source=synthetic"])
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


RUN = ["vit-tiny", "--tpu", "cpu-4", "--steps", "40", "eval_every=20", "checkpoint_every=20",
       "log_every=1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_run(tmp_path_factory, RUN)


def test_vit_tiny_learns_the_pattern_set(trained):
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    top1 = [r["val_top1"] for r in records if "val_top1" in r]
    train = losses(trained)
    assert train[40] < train[1] - 0.5
    assert len(top1) == 2 and top1[-1] > max(0.5, top1[0])  # chance is 1/6
    assert max(r.get("compiles", 0) for r in records) <= 2  # evaluation does not recompile


def test_sigkill_then_rerun_resumes_with_identical_losses(trained, tmp_path):
    kill_after_first_checkpoint_then_rerun(RUN, tmp_path / "run", first=20)
    assert losses(tmp_path / "run") == losses(trained)


def test_export_and_eval_top1(trained, tmp_path):
    exported = zoo("export", str(trained), str(tmp_path / "hf"))
    assert exported.returncode == 0, exported.stderr[-2000:]
    model = transformers.ViTForImageClassification.from_pretrained(tmp_path / "hf")
    assert model.config.id2label[0] == "checker"
    assert (tmp_path / "hf" / "preprocessor_config.json").is_file()
    scored = zoo("eval", str(trained), "--out", str(tmp_path / "eval"))
    assert scored.returncode == 0, scored.stderr[-2000:]
    record = json.loads((tmp_path / "eval" / "eval_results.json").read_text())
    last = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert record["top1"] == pytest.approx(last[-1]["val_top1"], abs=1e-6)
    assert "top1" in scored.stdout
