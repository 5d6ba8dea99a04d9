"""`zoo train --init-from` as a user runs it: a Hugging Face folder of no zoo size (a tiny
Qwen3 made here with transformers) named by its family, run-time `model.*` keys honoured,
the folder given relative and stored absolute, so the run's other commands work from
anywhere and a rerun of the run folder resumes it without a model name or --init-from; and what is
refused before any model is built."""

import pytest
import torch
import transformers
import yaml

from tests.support.paths import ROOT
from tests.support.runs import forked_zoo, losses, zoo, zoo_here
from zoo.qwen3.config import Qwen3Config

TINY = Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16)
RUN_TIME = ["model.attention=plain", "model.loss_chunk_tokens=16", "lora.rank=4",
            "seq_len=64", "log_every=1", "--tpu", "cpu-1"]


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    from core.data import load_tokenizer

    folder = tmp_path_factory.mktemp("start") / "hf"
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(TINY.to_hf()).save_pretrained(folder)
    load_tokenizer("default").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def other(hf, tmp_path_factory):
    """`hf`'s config.json beside weights of another MLP width."""
    folder = tmp_path_factory.mktemp("other") / "hf"
    transformers.Qwen3ForCausalLM(Qwen3Config(**{**vars(TINY), "intermediate_size": 96})
                                  .to_hf()).save_pretrained(folder)
    (folder / "config.json").write_text((hf / "config.json").read_text())
    return folder


def test_a_model_name_of_another_size_or_weights_of_other_shapes_are_refused_before_a_model(
        hf, other, tmp_path, modules_built):
    cases = [(["qwen3-8b", "--init-from", str(hf)],
              f"Error: --init-from {hf} holds a qwen3 of vocab_size 4096, hidden_size 64, "
              "intermediate_size 128, not qwen3-8b (vocab_size 151936, hidden_size 4096, "
              "intermediate_size 12288); name qwen3 or no model (the folder's own)"),
             (["--init-from", str(other), "data.tokenizer=default"],
              f"Error: checkpoint {other} does not fit the model: 'model.layers.0.mlp.gate_proj"
              ".weight' is of the wrong shape")]
    for args, line in cases:
        result = zoo_here("train", *args, "--out", str(tmp_path / "never"))
        assert (result.exit_code, result.output.strip()) == (1, line)
    assert modules_built[0] == 0
    assert not (tmp_path / "never").exists()


def test_an_empty_config_is_refused_before_any_model_is_built(hf, tmp_path):
    """(No model built is what "at once" means however busy the machine: it once built a 7B
    llama on the host.)"""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    (empty / "model.safetensors").write_bytes((hf / "model.safetensors").read_bytes())
    [result] = forked_zoo([["train", "llama-tiny", "--init-from", str(empty), "--out",
                            str(tmp_path / "never")]])
    assert result["returncode"] == 1
    assert result["stderr"].strip() == (
        f"Error: {empty}/config.json has no vocab_size, hidden_size, intermediate_size, "
        "num_hidden_layers, num_attention_heads: the model's architecture is read from it, "
        "never guessed; restore the folder's config.json")
    assert result["modules_built"] == 0


def test_a_relative_folder_is_stored_absolute_and_a_rerun_needs_no_init_from(hf, tmp_path):
    run = tmp_path / "run"
    first = zoo("train", "--init-from", "hf", "--steps", "2", "--out", str(run), *RUN_TIME,
                cwd=hf.parent)
    assert first.returncode == 0, first.stderr[-3000:]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["init_from"], saved["model_name"], saved["data"]["tokenizer"]) == (
        str(hf), "qwen3", str(hf))
    assert (saved["model"]["attention"], saved["model"]["loss_chunk_tokens"],
            saved["model"]["num_hidden_layers"]) == ("plain", 16, 2)
    # from another directory: the LoRA run's base is found where it was started from
    generated = zoo_here("generate", str(run), "--prompt", "The", "--max-new-tokens", "3",
                         "--host")  # in this process: no devices of its own
    assert generated.exit_code == 0, generated.output[-2000:]
    rerun = zoo("train", "--steps", "3", "--out", str(run), *RUN_TIME)  # no model, no start
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"note: {run} started from --init-from {hf}; resuming from it" in rerun.stderr
    assert sorted(losses(run)) == [1, 2, 3]
    assert ROOT != hf.parent
