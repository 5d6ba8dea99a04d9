"""Registry entry for the Qwen3-MoE family: the mixture-of-experts decoder's FLOPs (active
experts only), memory, active parameters and task (the load-balancing loss)."""

from pathlib import Path

from zoo.common.attention_kernel import for_slice
from zoo.common.decoder_costs import (
    moe_activation_bytes,
    moe_active_parameters,
    moe_forward_flops,
)
from zoo.common.generation import gqa_layout
from zoo.qwen3moe.config import SIZES, Qwen3MoeConfig
from zoo.qwen3moe.hf import config_from_hf, load_hf
from zoo.qwen3moe.model import Qwen3MoeForCausalLM
from zoo.registry import ModelFamily
from zoo.tasks.moe_causal_lm import MOE_CAUSAL_LM

FAMILY = ModelFamily(
    name="qwen3moe",
    config_cls=Qwen3MoeConfig,
    sizes=SIZES,
    model_cls=Qwen3MoeForCausalLM,
    task=MOE_CAUSAL_LM,
    presets_dir=Path(__file__).parent,
    layer_classes=("Qwen3MoeDecoderLayer",),
    layer_stacks=("model.layers",),
    shared_sharding="moe_decoder",
    without_presets=("remat/scan_offload", "remat/scan_save_qkv_proj"),
    forward_flops=moe_forward_flops,
    activation_bytes=moe_activation_bytes,
    hf_class="Qwen3MoeForCausalLM",
    hf_config=Qwen3MoeConfig.to_hf,
    config_from_hf=config_from_hf,
    load_hf=load_hf,
    for_slice=for_slice,
    active_parameters=moe_active_parameters,
    cache_layout=gqa_layout,
)
