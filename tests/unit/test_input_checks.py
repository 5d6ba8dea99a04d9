"""Inputs refused in the config layer, before a model is built: optimizer and schedule
numbers, model sizes, mesh axes that do not divide what they split, generation limits and
new family names (the CLI's one-line answers are in tests/e2e/test_bad_inputs.py)."""

import re

import pytest

from core.errors import UserError
from core.optim import OptimConfig, ScheduleConfig
from zoo.app.generate import check_positions, check_sampling
from zoo.app.run import resolve_run
from zoo.app.scaffold import check_not_shadowing
from zoo.llama.config import LlamaConfig


@pytest.mark.parametrize("fields, message", [
    ({"lr": float("inf")}, "optim.lr must be a finite number >= 0, not inf"),
    ({"lr": -1e-3}, "optim.lr must be a finite number >= 0, not -0.001"),
    ({"eps": float("nan")}, "optim.eps must be a finite number > 0, not nan"),
    ({"weight_decay": -1.0}, "optim.weight_decay must be a finite number >= 0"),
    ({"grad_clip": float("inf")}, "optim.grad_clip must be a finite number >= 0"),
    ({"betas": [0.9, 1.0]}, "optim.betas must be two numbers in [0, 1)"),
    ({"betas": [0.9, 0.95, 0.99]}, "optim.betas must be two numbers in [0, 1)"),
])
def test_optimizer_numbers_are_refused(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        OptimConfig(**fields)


def test_zero_lr_weight_decay_grad_clip_and_beta_are_allowed():
    OptimConfig(lr=0.0, weight_decay=0.0, grad_clip=0.0, betas=[0.0, 0.0])  # lr 0: frozen


@pytest.mark.parametrize("fields, message", [
    ({"warmup_steps": -1}, "schedule.warmup_steps must be >= 0"),
    ({"min_lr_ratio": float("nan")}, "schedule.min_lr_ratio must be in [0, 1]"),
    ({"decay": "step"}, "schedule.decay must be cosine, linear or constant"),
])
def test_schedule_numbers_are_refused(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ScheduleConfig(**fields)


def test_model_sizes_must_be_positive():
    with pytest.raises(ValueError, match="model.num_key_value_heads must be at least 1, not 0"):
        LlamaConfig(num_key_value_heads=0)
    with pytest.raises(ValueError, match="model.rms_norm_eps must be a finite number > 0"):
        LlamaConfig(rms_norm_eps=float("nan"))
    LlamaConfig(head_dim=None)  # None: derived from the hidden size


@pytest.mark.parametrize("model, overrides, message", [
    ("mixtral-tiny", ["tpu=cpu-3", "mesh.expert=3"],
     "mesh.expert=3 must divide model.num_local_experts (4); on cpu-3 use mesh.expert=1"),
    ("mixtral-8x7b", ["tpu=v5p-128", "mesh.expert=16"],
     "mesh.expert=16 must divide model.num_local_experts (8); on v5p-128 use "
     "mesh.expert=1, 2, 4 or 8"),
    ("llama-tiny", ["tpu=cpu-8", "mesh.fsdp=1", "mesh.tensor=-1"],
     "mesh.tensor=8 must divide model.num_key_value_heads (4)"),
    ("llama-tiny", ["tpu=cpu-4", "mesh.tensor=4", "model.intermediate_size=770"],
     "mesh.tensor=4 must divide model.intermediate_size (770)"),
    ("llama-tiny", ["tpu=cpu-4", "mesh.sequence=4", "seq_len=254"],
     "mesh.sequence=4 must divide seq_len (254)"),
    ("vit-tiny", ["tpu=cpu-8", "mesh.tensor=8"],
     "mesh.tensor=8 must divide model.num_attention_heads (4)"),
])
def test_mesh_axes_must_divide_what_they_split(model, overrides, message):
    with pytest.raises(UserError, match=re.escape(message)):
        resolve_run(model, overrides)


def test_mesh_axes_that_divide_or_do_not_tile_pass_the_model_check():
    resolve_run("mixtral-tiny", ["tpu=cpu-4", "mesh.expert=2", "mesh.tensor=2"])
    resolve_run("mixtral-8x7b", ["tpu=v5p-128", "mesh.expert=8"])
    # a mesh that cannot tile the slice is left to the mesh's own message
    with pytest.raises(UserError, match="cannot fill 1 devices"):
        resolve_run("llama-tiny", ["mesh.tensor=3"])


def test_generation_must_fit_the_positions():
    config = LlamaConfig(max_position_embeddings=16)
    check_positions(config, prompt_tokens=6, max_new_tokens=10)
    with pytest.raises(UserError, match="use --max-new-tokens 10 or less"):
        check_positions(config, prompt_tokens=6, max_new_tokens=11)
    with pytest.raises(UserError, match="shorten the prompt"):
        check_positions(config, prompt_tokens=16, max_new_tokens=1)


@pytest.mark.parametrize("options, message", [
    ((0, 0.0, 0), "--max-new-tokens must be at least 1, not 0"),
    ((5, float("inf"), 0), "--temperature must be a finite number >= 0"),
    ((5, -0.5, 0), "--temperature must be a finite number >= 0"),
    ((5, 1.0, -1), "--top-k must be >= 0"),
])
def test_sampling_options_are_refused(options, message):
    with pytest.raises(UserError, match=re.escape(message)):
        check_sampling(*options)


@pytest.mark.parametrize("name, message", [
    ("core", "already a zoo package or module"),
    ("app", "already a zoo package or module"),
    ("registry", "already a zoo package or module"),
    ("benchmarks", "already a zoo package or module"),
    ("zoo", "already a zoo package or module"),
    ("os", "standard-library module"),
    ("import", "Python keyword"),
])
def test_family_names_that_shadow_are_refused(name, message):
    with pytest.raises(UserError, match=message):
        check_not_shadowing(name)


def test_a_fresh_family_name_is_allowed():
    check_not_shadowing("mynet")
