"""A value where a section belongs, in a YAML file or an override, and an optim.name that is
no optimizer: one line naming the key or value and what to write instead, before any model."""

import pytest
import torch

from core.config import load
from core.errors import UserError
from core.optim import OptimConfig, build_optimizer
from zoo.tasks.causal_lm import LMTrainConfig

OPTIM_KEYS = "(keys name, lr, weight_decay, betas, eps, grad_clip), not a value"


def refusal(files=(), overrides=()) -> str:
    with pytest.raises(UserError) as excinfo:
        load(LMTrainConfig, files=files, overrides=overrides)
    assert "\n" not in str(excinfo.value)
    return str(excinfo.value)


def test_a_value_for_a_section_in_a_file_names_the_section(tmp_path):
    (tmp_path / "run.yaml").write_text("optim: 0.001\n")
    assert refusal(files=[str(tmp_path / "run.yaml")]) == (
        f"in {tmp_path / 'run.yaml'}: config key 'optim' is a section {OPTIM_KEYS}; "
        "write optim: {lr: 0.001}")
    (tmp_path / "empty.yaml").write_text("optim:\n")
    assert refusal(files=[str(tmp_path / "empty.yaml")]).endswith(f"'optim' is a section "
                                                                  f"{OPTIM_KEYS}")


def test_a_value_for_a_section_in_an_override_names_the_section():
    assert refusal(overrides=["optim=0.001"]) == (
        f"config key 'optim' is a section {OPTIM_KEYS}; write optim.lr=0.001")
    assert refusal(overrides=["data=my.jsonl"]).endswith("write data.source=my.jsonl")
    assert "config key 'mesh' is a section" in refusal(overrides=["mesh=[1,2]"])


def test_sections_and_values_where_they_belong_still_load():
    config = load(LMTrainConfig, overrides=["optim={}", "optim.lr=0.01", "data.source=x.txt"])
    assert (config.optim.lr, config.data.source) == (0.01, "x.txt")


@pytest.mark.parametrize("name, message", [
    ("json:dumps", "optim.name=json:dumps is a function, not a torch.optim.Optimizer subclass"),
    ("collections:OrderedDict",
     "optim.name=collections:OrderedDict is a class but not a torch.optim.Optimizer subclass"),
    ("zoo_no_such_module:Opt", "optim.name=zoo_no_such_module:Opt: cannot import "
                               "zoo_no_such_module"),
    ("torch.optim:NoSuch", "optim.name=torch.optim:NoSuch: module torch.optim has no 'NoSuch'"),
    ("torch.optim:Optimizer", "optim.name=torch.optim:Optimizer: its constructor takes no lr"),
    ("adam", "unknown optimizer optim.name=adam; use adamw, sgd or package.module:ClassName"),
])
def test_an_optimizer_name_that_is_no_optimizer_is_refused_with_the_config(name, message):
    assert message in refusal(overrides=[f"optim.name={name}"])


def test_an_optimizer_without_weight_decay_trains_without_it_and_says_so(capsys):
    params = [torch.nn.Parameter(torch.ones(2))]
    optimizer = build_optimizer(OptimConfig(name="torch.optim:Rprop"), params)
    assert isinstance(optimizer, torch.optim.Rprop)
    assert capsys.readouterr().err == ("warning: optim.name=torch.optim:Rprop takes no "
                                       "weight_decay; training without optim.weight_decay=0.1\n")
    build_optimizer(OptimConfig(name="torch.optim:Rprop", weight_decay=0), params)
    assert capsys.readouterr().err == ""
    custom = OptimConfig(name="tests.support.custom_optim:SGDWithUpdateNorm", weight_decay=0.5)
    assert build_optimizer(custom, params).defaults["weight_decay"] == 0.5

