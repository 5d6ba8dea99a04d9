"""Registry entry for MyModel: what the runtime, bench, plan and conformance suite call."""

from pathlib import Path

from core.decoder_shape import DecoderShape
from core.flops import decoder_lm_forward_flops_per_token
from core.memory import decoder_stack_activation_bytes
from core.task import RunConfig
from zoo.registry import ModelFamily
from zoo.tasks.causal_lm import CAUSAL_LM

from .config import SIZES, MyModelConfig
from .model import MyModelForCausalLM


def decoder_shape(config: MyModelConfig) -> DecoderShape:
    return DecoderShape(layers=config.num_layers, hidden=config.hidden_size,
                        heads=config.num_heads, vocab=config.vocab_size,
                        intermediate=config.mlp_ratio * config.hidden_size, gated_mlp=False)


def forward_flops(run: RunConfig, causal: bool = True) -> float:
    """Forward matmul FLOPs per token (the position embedding is a lookup, not a matmul)."""
    return decoder_lm_forward_flops_per_token(decoder_shape(run.model), run.seq_len, causal)


def activation_bytes(run: RunConfig, batch_per_device: int, tensor: int, remat: str | None,
                     bytes_per_value: int, on_tpu: bool) -> dict[str, float]:
    return decoder_stack_activation_bytes(
        decoder_shape(run.model), seq=run.seq_len, batch=batch_per_device, tensor=tensor,
        remat=remat, bytes_per_value=bytes_per_value, flash=False)


FAMILY = ModelFamily(
    name="mymodel",
    config_cls=MyModelConfig,
    sizes=SIZES,
    model_cls=MyModelForCausalLM,
    task=CAUSAL_LM,
    presets_dir=Path(__file__).parent,
    layer_classes=("MyModelBlock",),
    layer_stacks=("blocks",),
    # the shared remat presets it does not offer: its attention names no query, key and value
    # projections (core/remat.py QKV) for save_qkv_proj to keep
    without_presets=("remat/scan_save_qkv_proj",),
    forward_flops=forward_flops,
    activation_bytes=activation_bytes,
    # Hugging Face interop is optional: set hf_class, hf_config, config_from_hf, load_hf
    # (see zoo/llama/family.py) and the conformance suite checks the export round trip.
)
