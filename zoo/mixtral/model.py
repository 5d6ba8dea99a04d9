"""Mixtral: zoo/common's mixture-of-experts decoder (routed experts, router statistics) as it
is, under Mixtral's class names. Parameter names equal transformers' `MixtralForCausalLM`."""

from __future__ import annotations

from zoo.common.moe import Experts, SparseMoeBlock
from zoo.common.moe_decoder import MoeDecoderLayer, MoeDecoderModel, MoeForCausalLM


class MixtralExperts(Experts):
    """zoo/common's experts under Mixtral's name (messages name a module by its class)."""


class MixtralSparseMoeBlock(SparseMoeBlock):
    experts_cls = MixtralExperts


class MixtralDecoderLayer(MoeDecoderLayer):
    mlp_cls = MixtralSparseMoeBlock


class MixtralModel(MoeDecoderModel):
    layer_cls = MixtralDecoderLayer


class MixtralForCausalLM(MoeForCausalLM):
    model_cls = MixtralModel
