"""A decoder family's FLOPs, activation memory and active parameters, from its config: the
analytic formulas of core (core/flops.py, core/memory.py) read through `DecoderShape`. The
mixture-of-experts variants count the router and the k experts a token reaches (active
experts only, as MaxText and torchprime count MoE FLOPs)."""

from __future__ import annotations

from core.decoder_shape import DecoderShape
from core.flops import decoder_lm_forward_flops_per_token
from core.memory import decoder_stack_activation_bytes
from core.task import RunConfig
from zoo.common.decoder_config import DecoderConfig
from zoo.common.moe_config import MoeConfig


def decoder_shape(config: DecoderConfig) -> DecoderShape:
    return DecoderShape(layers=config.num_hidden_layers, hidden=config.hidden_size,
                        heads=config.num_attention_heads, vocab=config.vocab_size,
                        kv_heads=config.num_key_value_heads, head_dim=config.dim_per_head,
                        intermediate=config.intermediate_size)


def forward_flops(run: RunConfig, causal: bool = True) -> float:
    """Forward matmul FLOPs per token at the run's sequence length."""
    return decoder_lm_forward_flops_per_token(decoder_shape(run.model), run.seq_len, causal)


def activation_bytes(run: RunConfig, batch_per_device: int, tensor: int, remat: str | None,
                     bytes_per_value: int, on_tpu: bool) -> dict[str, float]:
    return decoder_stack_activation_bytes(
        decoder_shape(run.model), seq=run.seq_len, batch=batch_per_device, tensor=tensor,
        remat=remat, bytes_per_value=bytes_per_value,
        flash=run.model.uses_flash(on_tpu, run.mesh.sequence != 1),
        logit_positions=run.model.loss_chunk_tokens)


def moe_decoder_shape(config: MoeConfig) -> DecoderShape:
    """Active parameters per token: the router and k of the E experts."""
    return DecoderShape(layers=config.num_hidden_layers, hidden=config.hidden_size,
                        heads=config.num_attention_heads, vocab=config.vocab_size,
                        kv_heads=config.num_key_value_heads, head_dim=config.dim_per_head,
                        intermediate=config.intermediate_size,
                        experts_per_token=config.num_experts_per_tok,
                        router_experts=config.num_local_experts)


def moe_forward_flops(run: RunConfig, causal: bool = True) -> float:
    """Forward matmul FLOPs per token at the run's sequence length (active experts only)."""
    return decoder_lm_forward_flops_per_token(moe_decoder_shape(run.model), run.seq_len, causal)


def moe_active_parameters(config: MoeConfig, total: int) -> int:
    """All but the experts a token is not routed to (k of E per layer)."""
    idle = config.num_local_experts - config.num_experts_per_tok
    per_expert = 3 * config.hidden_size * config.intermediate_size
    return total - config.num_hidden_layers * idle * per_expert


def moe_activation_bytes(run: RunConfig, batch_per_device: int, tensor: int, remat: str | None,
                         bytes_per_value: int, on_tpu: bool) -> dict[str, float]:
    return decoder_stack_activation_bytes(
        moe_decoder_shape(run.model), seq=run.seq_len, batch=batch_per_device, tensor=tensor,
        remat=remat, bytes_per_value=bytes_per_value, flash=run.model.uses_flash(on_tpu),
        logit_positions=run.model.loss_chunk_tokens)
