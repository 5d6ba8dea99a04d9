"""`zoo train --init-from RUN lora.rank=8` as a user runs it (with task=sft: the runs of
tests/e2e/conftest.py): adapters on a frozen base.
Only the adapters train (every base weight bit for bit as loaded, no gradient and no
optimizer state for it); the xla backend (4 devices) and the dtensor backend (2 processes)
give the same losses, the xla one stopped and resumed half way; the checkpoint holds the
adapters alone, a few percent of the full model's; the merged export and the PEFT adapter
folder give the same logits."""

import json

import pytest
import torch

from tests.e2e.conftest import LORA_TARGETS
from tests.e2e.test_dtensor import assert_same_losses
from tests.support.runs import env, losses, start_python, zoo_here


@pytest.fixture(scope="module")
def tuned(tuned_with_adapters):
    """{backend: run folder}: SFT with adapters (tests/e2e/conftest.py)."""
    return {name: folder for name, (folder, _) in tuned_with_adapters.items()}


def test_xla_and_dtensor_tune_alike_and_a_resumed_run_continues(tuned):
    assert_same_losses(losses(tuned["dtensor"]), losses(tuned["xla"]), range(1, 5))


def test_the_checkpoint_holds_the_adapters_alone(tuned, pretrained_run):
    from core.store.checkpoint_reader import load_checkpoint

    def size(folder):
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())

    tuned_step = tuned["xla"] / "checkpoints" / "step-00000004"
    assert set(load_checkpoint(tuned_step)) == {
        f"model.layers.{i}.{m}.{a}.weight" for i in range(4)
        for m in ("self_attn.q_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.down_proj")
        for a in ("lora_A", "lora_B")}
    full = size(pretrained_run / "checkpoints" / "step-00000002")  # weights and AdamW state
    assert size(tuned_step) < 0.05 * full, (size(tuned_step), full)


def test_only_the_adapters_train(tmp_path):
    report = tmp_path / "report.json"
    worker = start_python([str(tmp_path / "run"), str(report), "tpu=cpu-1", "steps=2",
                           "lora.rank=8", LORA_TARGETS, "seq_len=128", "optim.lr=1e-2"],
                          env(), module="tests.support.lora_worker")
    _, stderr = worker.communicate(timeout=600)
    assert worker.returncode == 0, stderr[-3000:]
    found = json.loads(report.read_text())
    assert len(found["trained"]) == 4 * 4 * 2 and found["frozen"] > 0
    assert found["changed"] == found["trained"]  # every base weight bit for bit as it was
    assert found["optimizer_holds"] == found["trained"]
    assert found["frozen_grads"] == []


def test_the_merged_export_and_the_adapter_folder_agree(tuned, tmp_path):
    import peft
    import transformers

    for args in ([], ["--adapter"]):
        result = zoo_here("export", str(tuned["xla"]), str(tmp_path / f"out{len(args)}"), *args)
        assert result.exit_code == 0, result.output[-2000:]
    assert "peft.PeftModel.from_pretrained over" in result.output
    config = json.loads((tmp_path / "out1" / "adapter_config.json").read_text())
    merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out0")
    over_base = transformers.AutoModelForCausalLM.from_pretrained(
        config["base_model_name_or_path"])
    adapted = peft.PeftModel.from_pretrained(over_base, tmp_path / "out1")
    ids = torch.randint(0, 4096, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = merged(ids).logits, adapted(ids).logits
        plain = transformers.AutoModelForCausalLM.from_pretrained(
            config["base_model_name_or_path"])(ids).logits
    assert (ours - plain).abs().max() > 1e-3  # the adapters trained
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0)
