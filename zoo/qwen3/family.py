"""Registry entry for the Qwen3 (dense) family: the decoder's FLOPs, memory and slice
choices (zoo/common; the per-head norms add no matmul)."""

from pathlib import Path

from zoo.common.attention_kernel import for_slice
from zoo.common.decoder_costs import activation_bytes, forward_flops
from zoo.common.generation import gqa_layout
from zoo.common.hf_weights import load_hf
from zoo.qwen3.config import SIZES, Qwen3Config
from zoo.qwen3.hf import config_from_hf
from zoo.qwen3.model import Qwen3ForCausalLM
from zoo.registry import ModelFamily
from zoo.tasks.causal_lm import CAUSAL_LM

FAMILY = ModelFamily(
    name="qwen3",
    config_cls=Qwen3Config,
    sizes=SIZES,
    model_cls=Qwen3ForCausalLM,
    task=CAUSAL_LM,
    presets_dir=Path(__file__).parent,
    layer_classes=("Qwen3DecoderLayer",),
    layer_stacks=("model.layers",),
    shared_sharding="dense_decoder",
    forward_flops=forward_flops,
    activation_bytes=activation_bytes,
    hf_class="Qwen3ForCausalLM",
    hf_config=Qwen3Config.to_hf,
    config_from_hf=config_from_hf,
    load_hf=load_hf,
    for_slice=for_slice,
    cache_layout=gqa_layout,
)
