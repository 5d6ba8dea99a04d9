"""Registry entry for the Gemma 3 (text) family: the decoder's FLOPs and memory (zoo/common;
the extra norms add no matmul; local layers' masked keys are computed, so counted), plain
attention on every backend (zoo/gemma3/model.py says why)."""

from pathlib import Path

from zoo.common.attention_kernel import for_slice
from zoo.common.decoder_costs import activation_bytes, forward_flops
from zoo.common.hf_weights import load_hf
from zoo.gemma3.config import SIZES, Gemma3Config
from zoo.gemma3.generation import gemma3_layout
from zoo.gemma3.hf import config_from_hf
from zoo.gemma3.model import Gemma3ForCausalLM
from zoo.registry import ModelFamily
from zoo.tasks.causal_lm import CAUSAL_LM

FAMILY = ModelFamily(
    name="gemma3",
    config_cls=Gemma3Config,
    sizes=SIZES,
    model_cls=Gemma3ForCausalLM,
    task=CAUSAL_LM,
    presets_dir=Path(__file__).parent,
    layer_classes=("Gemma3DecoderLayer",),
    layer_stacks=("model.layers",),
    shared_sharding="dense_decoder",
    without_presets=("sharding/fsdp_context",),
    forward_flops=forward_flops,
    activation_bytes=activation_bytes,
    hf_class="Gemma3ForCausalLM",
    hf_config=Gemma3Config.to_hf,
    config_from_hf=config_from_hf,
    load_hf=load_hf,
    for_slice=for_slice,
    cache_layout=gemma3_layout,
)
