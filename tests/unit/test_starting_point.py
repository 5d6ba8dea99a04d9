"""A starting point (`--init-from`) identified whole before any model is built, and the
host-memory guard every build passes: tiny Hugging Face folders made here with
transformers, read in this process (no model built off the meta device)."""

import json
import os
import shutil

import pytest
import torch
import transformers
from safetensors.torch import save_file

from core import runtime
from core.errors import UserError
from core.hf import check_weights
from zoo.app.init_from import resolve_started_run, starting_point
from zoo.app.run import resolve_run
from zoo.common.architecture import run_time_keys
from zoo.qwen3.config import Qwen3Config
from zoo.registry import family, resolve

TINY_QWEN3 = Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16)


def qwen3_folder(folder, tokenizer: bool = True, config: Qwen3Config = TINY_QWEN3):
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(config.to_hf()).save_pretrained(folder)
    if tokenizer:
        from core.data import load_tokenizer

        load_tokenizer("default").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return qwen3_folder(tmp_path_factory.mktemp("tiny") / "hf")


def test_a_folder_of_no_zoo_size_is_named_by_its_family_and_stored_absolute(tiny, monkeypatch):
    monkeypatch.chdir(tiny.parent)
    start = starting_point("hf", None)
    assert (start.model_name, start.source, start.tokenizer) == ("qwen3", str(tiny), str(tiny))
    assert (start.model.hidden_size, start.model.num_hidden_layers) == (64, 2)


def test_a_folder_of_a_zoo_size_is_named_by_that_size(tmp_path):
    folder = qwen3_folder(tmp_path / "hf", config=family("qwen3").sizes["tiny"])
    assert starting_point(str(folder), None).model_name == "qwen3-tiny"
    assert starting_point(str(folder), "qwen3").model_name == "qwen3-tiny"


def test_a_model_name_of_another_size_is_refused_naming_both(tiny):
    with pytest.raises(UserError, match=r"holds a qwen3 of .*hidden_size 64.*, not qwen3-0.6b "
                                        r"\(.*hidden_size 1024.*\); name qwen3 or no model"):
        starting_point(str(tiny), "qwen3-0.6b")


@pytest.mark.parametrize("raw, missing", [
    ({}, "vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads"),
    ({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 8, "hidden_size": 8,
      "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2},
     "num_key_value_heads, head_dim"),
])
def test_a_config_missing_an_architecture_key_is_refused_before_any_model(
        tmp_path, modules_built, raw, missing):
    (tmp_path / "config.json").write_text(json.dumps(raw))
    save_file({"x.weight": torch.zeros(2)}, tmp_path / "model.safetensors")  # weights beside
    model = "llama-tiny" if not raw else None
    with pytest.raises(UserError, match=f"config.json has no {missing}: the model's "
                                        "architecture is read from it, never guessed"):
        starting_point(str(tmp_path), model)
    assert modules_built[0] == 0


def test_weights_cut_short_garbage_or_of_other_shapes_are_refused_by_their_headers(
        tiny, tmp_path, modules_built):
    cut = shutil.copytree(tiny, tmp_path / "cut")
    size = (cut / "model.safetensors").stat().st_size
    os.truncate(cut / "model.safetensors", size - 10)
    with pytest.raises(UserError, match=rf"cut/model.safetensors is cut short "
                                        rf"\({size - 10:,} of {size:,} bytes\)"):
        starting_point(str(cut), None)
    garbage = shutil.copytree(tiny, tmp_path / "garbage")
    (garbage / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(UserError, match="garbage/model.safetensors is damaged"):
        starting_point(str(garbage), None)
    other = shutil.copytree(tiny, tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    with pytest.raises(UserError, match="does not fit the model: 'model.layers.0.mlp"):
        starting_point(str(other), None)
    assert modules_built[0] == 0


def test_run_time_keys_are_honoured_and_architectural_ones_refused(tiny):
    run = resolve_started_run("qwen3", [f"init_from={tiny}", "model.attention=plain",
                                        "model.loss_chunk_tokens=32"])[0]
    assert (run.config.model.attention, run.config.model.loss_chunk_tokens) == ("plain", 32)
    assert run.config.model.num_hidden_layers == 2
    assert (run.config.init_from, run.config.data.tokenizer) == (str(tiny), str(tiny))
    with pytest.raises(UserError, match=r"model.num_hidden_layers=4 would change the "
                                        rf"architecture of --init-from {tiny}, which holds "
                                        r"num_hidden_layers=2.*model.attention"):
        resolve_started_run("qwen3", [f"init_from={tiny}", "model.num_hidden_layers=4"])


def test_moe_dispatch_and_its_weights_are_run_time_keys_declared_once():
    for name in ("qwen3moe", "mixtral", "deepseek3"):
        keys = run_time_keys(family(name).config_cls)
        assert {"dispatch", "capacity_factor", "router_aux_loss_coef", "attention",
                "loss_chunk_tokens"} <= keys, name
        assert not {"hidden_size", "num_local_experts", "num_hidden_layers"} & keys


def test_a_folder_without_a_tokenizer_needs_one_named(tmp_path):
    folder = qwen3_folder(tmp_path / "hf", tokenizer=False)
    with pytest.raises(UserError, match=r"holds no tokenizer .*pass data.tokenizer="):
        resolve_started_run("qwen3", [f"init_from={folder}"])
    run = resolve_started_run("qwen3", [f"init_from={folder}", "data.tokenizer=default"])[0]
    assert run.config.data.tokenizer == "default"


def test_a_family_name_alone_needs_a_starting_point():
    with pytest.raises(UserError, match=r"qwen3 is a model family; name one of its sizes "
                                        r"\(qwen3-tiny, .*\), or start from a checkpoint"):
        resolve_run("qwen3", [])


def test_a_model_the_host_cannot_hold_is_refused_before_it_is_built(monkeypatch,
                                                                    modules_built):
    fam, size = resolve("llama-tiny")
    monkeypatch.setattr(runtime, "host_memory_available", lambda: 2**20)
    with pytest.raises(UserError, match=r"a llama model of 0\.\d+B parameters needs [\d.]+ GiB "
                                        r"of host memory to build \(torch.float32\), more than "
                                        r"the 0.0 GiB available here"):
        fam.build(fam.sizes[size])
    assert modules_built[0] == 0
    with torch.device("meta"):  # bookkeeping: no memory, no refusal
        fam.build(fam.sizes[size], init=False)
    monkeypatch.setattr(runtime, "host_memory_available", lambda: 2**40)
    assert fam.build(fam.sizes[size]) is not None


def test_an_hf_folder_the_host_cannot_hold_is_refused_before_it_is_loaded(tmp_path,
                                                                          monkeypatch):
    """`zoo eval` of a Hugging Face folder loads it through transformers, not
    ModelFamily.build: its weights' bytes are checked against the host's memory first."""
    save_file({"w": torch.zeros(2**16)}, str(tmp_path / "model.safetensors"))
    check_weights(tmp_path)
    monkeypatch.setattr(runtime, "host_memory_available", lambda: 2**16)
    with pytest.raises(UserError, match=r"the weights in .* take 0\.0 GiB, more than the 0\.0 "
                                        r"GiB of host memory available here"):
        check_weights(tmp_path)
