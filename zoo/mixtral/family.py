"""Registry entry for the Mixtral family."""

from pathlib import Path

from core.decoder_shape import DecoderShape
from core.flops import decoder_lm_forward_flops_per_token
from core.memory import decoder_stack_activation_bytes
from core.task import RunConfig
from zoo.llama.family import for_slice
from zoo.mixtral.config import SIZES, MixtralConfig
from zoo.mixtral.hf import config_from_hf, load_hf
from zoo.mixtral.model import MixtralForCausalLM
from zoo.mixtral.task import MOE_CAUSAL_LM
from zoo.registry import ModelFamily


def decoder_shape(config: MixtralConfig) -> DecoderShape:
    """Active parameters per token: the router and k of the E experts."""
    return DecoderShape(layers=config.num_hidden_layers, hidden=config.hidden_size,
                        heads=config.num_attention_heads, vocab=config.vocab_size,
                        kv_heads=config.num_key_value_heads, head_dim=config.dim_per_head,
                        intermediate=config.intermediate_size,
                        experts_per_token=config.num_experts_per_tok,
                        router_experts=config.num_local_experts)


def forward_flops(run: RunConfig, causal: bool = True) -> float:
    """Forward matmul FLOPs per token at the run's sequence length (active experts only, as
    MaxText and torchprime count MoE FLOPs)."""
    return decoder_lm_forward_flops_per_token(decoder_shape(run.model), run.seq_len, causal)


def active_parameters(config: MixtralConfig, total: int) -> int:
    """All but the experts a token is not routed to (k of E per layer)."""
    idle = config.num_local_experts - config.num_experts_per_tok
    per_expert = 3 * config.hidden_size * config.intermediate_size
    return total - config.num_hidden_layers * idle * per_expert


def activation_bytes(run: RunConfig, batch_per_device: int, tensor: int, remat: str | None,
                     bytes_per_value: int, on_tpu: bool) -> dict[str, float]:
    return decoder_stack_activation_bytes(
        decoder_shape(run.model), seq=run.seq_len, batch=batch_per_device, tensor=tensor,
        remat=remat, bytes_per_value=bytes_per_value, flash=run.model.uses_flash(on_tpu),
        logit_positions=run.model.loss_chunk_tokens)


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
    forward_flops=forward_flops,
    activation_bytes=activation_bytes,
    hf_class="MixtralForCausalLM",
    hf_config=MixtralConfig.to_hf,
    config_from_hf=config_from_hf,
    load_hf=load_hf,
    for_slice=for_slice,
    active_parameters=active_parameters,
)
