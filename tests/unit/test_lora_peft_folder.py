"""An adapter folder PEFT would load without some of its adapters is refused: in a model
with expert weights (deepseek3), PEFT 0.21.2 applies targets named gate_proj/up_proj/
down_proj to the experts' stacked weights and leaves the linear layers of those names (the
dense first layers', the shared experts') unadapted. That is why deepseek3's adapter folder
and merged export differed (docs/lora.md); llama's linear down_proj is kept."""

import pytest
import torch

from core import lora
from core.errors import UserError
from zoo.registry import resolve


def adapted(model_name: str, targets: list[str]):
    family, size = resolve(model_name)
    with torch.device("meta"):
        model = family.build(family.sizes[size], init=False)
    config = lora.LoraConfig(rank=4, targets=targets)
    lora.add_adapters(model, config, seed=0)
    return model, config


def test_deepseek3s_mlp_linear_adapters_are_refused_for_an_adapter_folder():
    model, config = adapted("deepseek3-tiny", ["q_b_proj", "down_proj"])
    with pytest.raises(UserError, match=r"adapter folder would lose the adapters of \d+ "
                                         r"linear layers \(model\.layers\.0\.mlp\.down_proj"):
        lora.as_peft(model, config)


def test_attention_and_expert_adapters_of_deepseek3_and_llamas_mlp_are_exported():
    model, config = adapted("deepseek3-tiny", ["q_b_proj", "kv_b_proj", "gate_up_proj"])
    targets, state = lora.as_peft(model, config)
    assert targets == {"target_modules": ["q_b_proj", "kv_b_proj"],
                       "target_parameters": ["gate_up_proj"]}
    model, config = adapted("llama-tiny", ["q_proj", "down_proj"])
    targets, state = lora.as_peft(model, config)
    assert targets["target_modules"] == ["q_proj", "down_proj"]
    assert any(".mlp.down_proj.lora_A" in name for name in state)
