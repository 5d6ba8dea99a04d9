"""Registry entry for the Mixtral family: the mixture-of-experts decoder's FLOPs (active
experts only), memory and active parameters (zoo/common), its task (the load-balancing loss)."""

from pathlib import Path

from zoo.common.attention_kernel import for_slice
from zoo.common.decoder_costs import (
    moe_activation_bytes,
    moe_active_parameters,
    moe_forward_flops,
)
from zoo.common.generation import gqa_layout
from zoo.mixtral.config import SIZES, MixtralConfig
from zoo.mixtral.hf import config_from_hf, load_hf
from zoo.mixtral.model import MixtralForCausalLM
from zoo.registry import ModelFamily
from zoo.tasks.moe_causal_lm import MOE_CAUSAL_LM

FAMILY = ModelFamily(
    name="mixtral",
    config_cls=MixtralConfig,
    sizes=SIZES,
    model_cls=MixtralForCausalLM,
    task=MOE_CAUSAL_LM,
    presets_dir=Path(__file__).parent,
    layer_classes=("MixtralDecoderLayer",),
    layer_stacks=("model.layers",),
    shared_sharding="moe_decoder",
    without_presets=("remat/scan_offload", "remat/scan_save_qkv_proj"),
    forward_flops=moe_forward_flops,
    activation_bytes=moe_activation_bytes,
    hf_class="MixtralForCausalLM",
    hf_config=MixtralConfig.to_hf,
    config_from_hf=config_from_hf,
    load_hf=load_hf,
    for_slice=for_slice,
    active_parameters=moe_active_parameters,
    cache_layout=gqa_layout,
)
