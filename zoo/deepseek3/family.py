"""Registry entry for the DeepSeek-V3 family."""

from pathlib import Path

from core.decoder_shape import DecoderShape
from core.memory import decoder_stack_activation_bytes
from core.task import RunConfig
from zoo.common.attention_kernel import for_slice
from zoo.deepseek3.config import SIZES, DeepseekV3Config
from zoo.deepseek3.generation import mla_layout
from zoo.deepseek3.hf import config_from_hf, load_hf
from zoo.deepseek3.model import DeepseekV3ForCausalLM
from zoo.registry import ModelFamily
from zoo.tasks.moe_causal_lm import MOE_CAUSAL_LM


def forward_flops(run: RunConfig, causal: bool = True) -> float:
    """Forward matmul FLOPs per token: latent attention's projections and products, the
    dense layers' MLP, and in routed layers the router, k routed and the shared experts
    (active experts only, as MaxText counts MoE FLOPs)."""
    c, seq = run.model, run.seq_len
    hidden, heads = c.hidden_size, c.num_attention_heads
    qk = c.qk_nope_head_dim + c.qk_rope_head_dim
    query = (hidden * c.q_lora_rank + c.q_lora_rank * heads * qk if c.q_lora_rank
             else hidden * heads * qk)
    projections = (query + hidden * (c.kv_lora_rank + c.qk_rope_head_dim)
                   + c.kv_lora_rank * heads * (c.qk_nope_head_dim + c.v_head_dim)
                   + heads * c.v_head_dim * hidden)
    dense, routed_layers = c.first_k_dense_replace, c.num_hidden_layers - c.first_k_dense_replace
    experts = c.num_experts_per_tok + c.n_shared_experts
    mlp = (dense * 3 * hidden * c.dense_intermediate_size
           + routed_layers * (hidden * c.num_local_experts
                              + 3 * hidden * c.intermediate_size * experts))
    weights = c.num_hidden_layers * projections + mlp + hidden * c.vocab_size
    attention = c.num_hidden_layers * seq * heads * (qk + c.v_head_dim)  # scores, values
    return 2.0 * (weights + (attention / 2 if causal else attention))


def active_parameters(config: DeepseekV3Config, total: int) -> int:
    """All but the routed experts a token does not reach (k of E per routed layer)."""
    idle = config.num_local_experts - config.num_experts_per_tok
    routed_layers = config.num_hidden_layers - config.first_k_dense_replace
    return total - routed_layers * idle * 3 * config.hidden_size * config.intermediate_size


def activation_bytes(run: RunConfig, batch_per_device: int, tensor: int, remat: str | None,
                     bytes_per_value: int, on_tpu: bool) -> dict[str, float]:
    """The decoder stack's estimate with latent attention read as heads of the query/key
    width and the routed layers' k + shared experts as the MLP (an estimate for planning;
    the TPU compile gives the real figure)."""
    c = run.model
    shape = DecoderShape(layers=c.num_hidden_layers, hidden=c.hidden_size,
                         heads=c.num_attention_heads, vocab=c.vocab_size,
                         kv_heads=c.num_attention_heads,
                         head_dim=c.qk_nope_head_dim + c.qk_rope_head_dim,
                         intermediate=c.intermediate_size,
                         experts_per_token=c.num_experts_per_tok + c.n_shared_experts,
                         router_experts=c.num_local_experts)
    return decoder_stack_activation_bytes(
        shape, seq=run.seq_len, batch=batch_per_device, tensor=tensor, remat=remat,
        bytes_per_value=bytes_per_value, flash=False,
        logit_positions=run.model.loss_chunk_tokens)


FAMILY = ModelFamily(
    name="deepseek3",
    config_cls=DeepseekV3Config,
    sizes=SIZES,
    model_cls=DeepseekV3ForCausalLM,
    task=MOE_CAUSAL_LM,
    presets_dir=Path(__file__).parent,
    layer_classes=("DeepseekV3DecoderLayer",),
    layer_stacks=("model.layers",),
    without_presets=("remat/scan_minimal", "remat/scan_offload", "remat/scan_save_qkv_proj"),
    forward_flops=forward_flops,
    activation_bytes=activation_bytes,
    hf_class="DeepseekV3ForCausalLM",
    hf_config=DeepseekV3Config.to_hf,
    config_from_hf=config_from_hf,
    load_hf=load_hf,
    for_slice=for_slice,
    active_parameters=active_parameters,
    cache_layout=mla_layout,
)
