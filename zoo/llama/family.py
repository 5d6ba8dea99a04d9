"""Registry entry for the Llama family."""

from pathlib import Path

from zoo.common.attention_kernel import for_slice
from zoo.common.decoder_costs import activation_bytes, forward_flops
from zoo.common.generation import gqa_layout
from zoo.common.hf_weights import load_hf
from zoo.llama.config import SIZES, LlamaConfig
from zoo.llama.hf import config_from_hf
from zoo.llama.model import LlamaForCausalLM
from zoo.registry import ModelFamily
from zoo.tasks.causal_lm import CAUSAL_LM

FAMILY = ModelFamily(
    name="llama",
    config_cls=LlamaConfig,
    sizes=SIZES,
    model_cls=LlamaForCausalLM,
    task=CAUSAL_LM,
    presets_dir=Path(__file__).parent,
    layer_classes=("LlamaDecoderLayer",),
    layer_stacks=("model.layers",),
    shared_sharding="dense_decoder",
    forward_flops=forward_flops,
    activation_bytes=activation_bytes,
    hf_class="LlamaForCausalLM",
    hf_config=LlamaConfig.to_hf,
    config_from_hf=config_from_hf,
    load_hf=load_hf,
    for_slice=for_slice,
    cache_layout=gqa_layout,
)
