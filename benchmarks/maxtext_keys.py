"""A zoo run config in MaxText 0.2.5's config keys: the same model shapes, batch, sequence,
mesh, remat, precision, attention, optimizer and task (pretraining, or supervised
fine-tuning on packed rows), so `zoo bench --compare maxtext` times and
`zoo plan --compile --compare maxtext` compiles the same work. A setting that changes the
program and has no MaxText counterpart is refused with its name, never dropped.
"""

from __future__ import annotations

from core.errors import UserError
from core.mesh import resolve_axis_sizes
from zoo.tasks.causal_lm import keeps_documents_apart

# zoo remat preset -> (MaxText remat_policy, scan_layers). MaxText wraps every decoder layer
# in jax.checkpoint whatever the policy ('none' saves nothing, as 'full' does), so keeping
# every activation has no exact counterpart: minimal_with_context saves every matmul output
# and the attention output and recomputes only elementwise work (no matmul), as zoo's
# unremated layers compute no matmul twice. scan_minimal, scan_save_qkv_proj and
# scan_offload are MaxText's `minimal`, `save_qkv_proj` and `custom` with the decoder layer
# input offloaded (everything else recomputed) by design.
REMAT = {"none": ("minimal_with_context", False), "checkpoint": ("full", False),
         "scan": ("minimal_with_context", True), "scan_checkpoint": ("full", True),
         "scan_minimal": ("minimal", True), "scan_save_qkv_proj": ("save_qkv_proj", True),
         "scan_offload": ("custom", True)}
CUSTOM_POLICY = ["decoder_layer_input=offload"]  # MaxText's other named tensors: remat
# zoo sharding preset -> the mesh axes it uses; each zoo axis is MaxText's ici_<axis>
# axis (its logical rules put FSDP, Megatron tensor and expert shards where zoo's do)
SHARDING_AXES = {"fsdp": ("data", "fsdp"), "fsdp_tensor": ("data", "fsdp", "tensor"),
                 "fsdp_expert": ("data", "fsdp", "expert")}
DECODER_BLOCKS = {"llama": "llama2", "mixtral": "mixtral", "qwen3": "qwen3",
                  "qwen3moe": "qwen3_moe", "gemma3": "gemma3", "deepseek3": "deepseek"}
QK_NORM = ("qwen3", "qwen3moe", "gemma3")  # queries and keys RMS-normed per head (use_qk_norm)
OPTIMIZERS = ("adamw", "sgd")
PRETRAINING = ("causal-lm", "moe-causal-lm")  # the families' own tasks: MaxText's pre_train


def maxtext_keys(family_name: str, cfg, topo) -> list[str]:
    """MaxText `key=value` settings for run config `cfg` (a causal LM of `family_name`)
    on slice `topo`; UserError naming the first setting MaxText cannot take."""
    return [*model_keys(family_name, cfg.model), *batch_keys(cfg, topo.devices),
            *mesh_keys(cfg, topo.devices), *remat_keys(cfg.remat),
            f"dtype={'bfloat16' if cfg.runs_in_bf16(topo) else 'float32'}",
            "weight_dtype=float32",  # zoo keeps fp32 master weights either way
            *attention_keys(cfg.model.uses_flash(topo.is_tpu)),
            *optimizer_keys(cfg.optim), *task_keys(cfg)]


def attention_keys(flash: bool) -> list[str]:
    """MaxText's attention as zoo's: the flash kernel, or scores materialised with the
    softmax in fp32 (core/attention.py's plain attention; MaxText's dot_product attention
    runs it in bf16 unless `float32_logits`)."""
    return ["attention=flash"] if flash else ["attention=dot_product", "float32_logits=true"]


def model_keys(family_name: str, model) -> list[str]:
    if family_name not in DECODER_BLOCKS:
        raise UserError(f"MaxText has no counterpart of the {family_name} family here "
                        f"(families that map: {', '.join(DECODER_BLOCKS)})")
    keys = [
        f"decoder_block={DECODER_BLOCKS[family_name]}",
        f"base_emb_dim={model.hidden_size}",
        # a dense layer's MLP (deepseek3's first layers have their own width)
        f"base_mlp_dim={getattr(model, 'dense_intermediate_size', model.intermediate_size)}",
        f"base_num_decoder_layers={model.num_hidden_layers}",
        f"base_num_query_heads={model.num_attention_heads}",
        f"base_num_kv_heads={model.num_key_value_heads}",
        f"head_dim={model.dim_per_head}",
        f"vocab_size={model.vocab_size}",
        f"logits_via_embedding={str(model.tie_word_embeddings).lower()}",
        f"normalization_layer_epsilon={model.rms_norm_eps}",
        f"rope_max_timescale={int(model.rope_theta)}",
    ]
    if family_name in QK_NORM:
        keys.append("use_qk_norm=true")
    if hasattr(model, "num_local_experts"):  # a mixture of experts (mixtral's, qwen3moe's)
        # capacity: GShard dispatch with token dropping per sequence, as zoo's; dense: every
        # expert on every token (MaxText's dense einsums without a capacity)
        capacity = model.capacity_factor if model.dispatch == "capacity" else -1.0
        keys += [f"num_experts={model.num_local_experts}",
                 f"num_experts_per_tok={model.num_experts_per_tok}",
                 f"base_moe_mlp_dim={model.intermediate_size}",
                 f"load_balance_loss_weight={model.router_aux_loss_coef}",
                 "sparse_matmul=false", f"capacity_factor={capacity}"]
    if family_name == "qwen3moe":
        keys.append(f"norm_topk_prob={str(model.norm_topk_prob).lower()}")
    if family_name == "gemma3":
        keys += gemma3_keys(model)
    if family_name == "deepseek3":
        keys += deepseek3_keys(model)
    return keys


def deepseek3_keys(model) -> list[str]:
    """Latent attention, the dense first layers, shared experts and grouped sigmoid routing
    with its bias, moved after each update at zoo's rate."""
    rope = ["rope_type=default"]
    if model.rope_factor != 1.0:
        rope = ["rope_type=yarn", f"rope_factor={model.rope_factor:g}",
                f"original_max_position_embeddings={model.rope_original_max_position_embeddings}",
                f"beta_fast={model.rope_beta_fast:g}", f"beta_slow={model.rope_beta_slow:g}",
                f"mscale={model.rope_mscale:g}"]
    return ["attention_type=mla", f"q_lora_rank={model.q_lora_rank}",
            f"kv_lora_rank={model.kv_lora_rank}", f"qk_nope_head_dim={model.qk_nope_head_dim}",
            f"qk_rope_head_dim={model.qk_rope_head_dim}", f"v_head_dim={model.v_head_dim}",
            f"first_num_dense_layers={model.first_k_dense_replace}",
            f"shared_experts={model.n_shared_experts}",
            f"routed_scaling_factor={model.routed_scaling_factor:g}",
            "routed_score_func=sigmoid", "routed_bias=true",
            f"routed_bias_update_rate={model.bias_update_rate:g}",
            f"n_routing_groups={model.n_group}", f"topk_routing_group={model.topk_group}",
            f"rope_interleave={str(model.rope_interleave).lower()}", *rope]


def gemma3_keys(model) -> list[str]:
    """MaxText's gemma3 block fixes one global layer in six and picks the query scale by
    model name: head_dim's (gemma3-4b, -12b) or hidden / heads (gemma3-27b), so a model name
    with that scale is given, its shapes overridden by the keys above."""
    if model.sliding_window_pattern != 6:
        raise UserError(f"model.sliding_window_pattern={model.sliding_window_pattern} has no "
                        "MaxText counterpart (its gemma3 has one global layer in 6)")
    scales = {model.dim_per_head: "gemma3-12b",
              model.hidden_size // model.num_attention_heads: "gemma3-27b"}
    if model.query_pre_attn_scalar not in scales:
        raise UserError(f"model.query_pre_attn_scalar={model.query_pre_attn_scalar} has no "
                        "MaxText counterpart (head_dim, or hidden_size / num_attention_heads)")
    return [f"model_name={scales[model.query_pre_attn_scalar]}", "override_model_config=true",
            f"sliding_window_size={model.sliding_window}",
            f"local_rope_max_timescale={int(model.rope_local_theta)}",
            f"rope_linear_scaling_factor={model.rope_linear_factor}",
            "use_post_attn_norm=true", "use_post_ffw_norm=true",
            "mlp_activations=[gelu,linear]"]


def batch_keys(cfg, devices: int) -> list[str]:
    """MaxText's batch is per device (every device of the slice) and per micro-batch."""
    per_device = f"{cfg.global_batch_size / (devices * cfg.grad_accum):g}"
    if int(devices * float(per_device)) * cfg.grad_accum != cfg.global_batch_size:
        raise UserError(f"global_batch_size={cfg.global_batch_size} over {devices} devices "
                        f"and grad_accum={cfg.grad_accum} is no per-device batch MaxText takes")
    return [f"per_device_batch_size={per_device}",
            f"gradient_accumulation_steps={cfg.grad_accum}", f"max_target_length={cfg.seq_len}"]


def mesh_keys(cfg, devices: int) -> list[str]:
    if cfg.sharding not in SHARDING_AXES:
        raise UserError(f"sharding={cfg.sharding} has no MaxText counterpart here (presets "
                        f"that map: {', '.join(SHARDING_AXES)})")
    sizes = resolve_axis_sizes(cfg.mesh, devices)
    stray = [axis for axis, size in sizes.items()
             if size > 1 and axis not in SHARDING_AXES[cfg.sharding]]
    if stray:
        raise UserError(f"mesh.{stray[0]}={sizes[stray[0]]} under sharding={cfg.sharding} has "
                        "no MaxText counterpart")
    dcn = cfg.mesh.dcn
    ici = [f"ici_{axis}_parallelism={sizes[axis] // dcn.get(axis, 1)}"
           for axis in SHARDING_AXES[cfg.sharding]]
    # MaxText's mesh axes each split into an ICI and a DCN degree, as zoo's (mesh.dcn). A
    # zoo mesh may split a physical torus axis (data=2 fsdp=128 on v6e-256's 16x16), which
    # MaxText refuses unless allowed; where no split is needed, JAX lays the mesh out as
    # without the flag (it splits only when no whole-axis assignment exists)
    return [*ici, *(f"dcn_{axis}_parallelism={dcn.get(axis, 1)}"
                    for axis in SHARDING_AXES[cfg.sharding] if dcn),
            "allow_split_physical_axes=true"]


def remat_keys(remat: str) -> list[str]:
    if remat not in REMAT:
        raise UserError(f"remat={remat} has no MaxText counterpart (presets that map: "
                        f"{', '.join(REMAT)})")
    policy, scan = REMAT[remat]
    return [f"remat_policy={policy}", f"scan_layers={str(scan).lower()}",
            *(CUSTOM_POLICY if policy == "custom" else [])]


def optimizer_keys(optim) -> list[str]:
    if optim.name not in OPTIMIZERS:
        raise UserError(f"optim.name={optim.name} has no MaxText counterpart here "
                        f"(optimizers that map: {', '.join(OPTIMIZERS)})")
    return [f"opt_type={optim.name}", f"gradient_clipping_threshold={optim.grad_clip:g}"]


def task_keys(cfg) -> list[str]:
    """Supervised fine-tuning as MaxText's SFT (`use_sft`, its loss on the completion only
    unless zoo trains on every token), its rows packed with segment ids as zoo's
    (`packing`); pretraining rows with documents kept apart (`data.document_mask`) are
    MaxText's packed pretraining. MaxText's train step always takes segment ids and
    positions (its `train_compile` batch carries both); these keys make its rows and loss
    mask those of the zoo run. Unpacked pretraining keeps MaxText's defaults."""
    task = getattr(cfg, "task", PRETRAINING[0])
    if task == "sft":
        every_token = cfg.data.train_on == "all"
        return [f"packing={str(keeps_documents_apart(cfg)).lower()}", "use_sft=true",
                f"sft_train_on_completion_only={str(not every_token).lower()}"]
    if task not in PRETRAINING:
        raise UserError(f"task={task} has no MaxText counterpart here (tasks that map: "
                        f"{', '.join([*PRETRAINING, 'sft'])})")
    return ["packing=true"] if keeps_documents_apart(cfg) else []
