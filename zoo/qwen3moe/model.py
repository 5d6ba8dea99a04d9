"""Qwen3-MoE: mixtral's decoder (zoo/mixtral/model.py: routed experts, router statistics)
with qwen3's attention (per-head query and key norms, zoo/qwen3/model.py). Parameter names
equal transformers' `Qwen3MoeForCausalLM`."""

from __future__ import annotations

from zoo.mixtral.model import MixtralDecoderLayer, MixtralForCausalLM, MixtralModel
from zoo.qwen3.model import Qwen3Attention


class Qwen3MoeDecoderLayer(MixtralDecoderLayer):
    attention_cls = Qwen3Attention


class Qwen3MoeModel(MixtralModel):
    layer_cls = Qwen3MoeDecoderLayer


class Qwen3MoeForCausalLM(MixtralForCausalLM):
    model_cls = Qwen3MoeModel
