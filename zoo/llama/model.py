"""A readable Llama 3 style decoder with Hugging Face parameter names.

RMSNorm, rotary embeddings (with Llama 3 scaling), SwiGLU, grouped-query attention, optional
tied embeddings. Parameter names equal `transformers.LlamaForCausalLM`'s, so its safetensors
load directly. No sharding calls and no host syncs: the whole forward is one XLA graph.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from core.attention import causal_attention
from core.backends.xla.ops import flash_attention
from core.remat import LayerStack, checkpoint_name
from zoo.llama.config import LlamaConfig


class LlamaRMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        # Normalise in fp32 like the reference, then return to the activation dtype.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_inverse_frequencies(config: LlamaConfig) -> torch.Tensor:
    dim = config.dim_per_head
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    # Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, a smooth ramp between.
    low_wavelen = scaling.original_max_position_embeddings / scaling.low_freq_factor
    high_wavelen = scaling.original_max_position_embeddings / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (scaling.original_max_position_embeddings / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


class LlamaAttention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.dim_per_head
        self.use_flash = config.attention == "flash"
        hidden = config.hidden_size
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = HeadsToHidden(self.heads, self.head_dim, hidden)

    def forward(self, x, cos, sin, segment_ids=None, window=None):
        """`window`: a sliding window (core/attention.py; gemma3's local layers, which never
        run the flash kernel)."""
        q, k, v = self.heads_qkv(x)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        if self.use_flash:
            out = flash_attention(q, k, v, segment_ids)
        else:
            out = causal_attention(q, k, v, segment_ids, window)
        return self.o_proj(out)

    def heads_qkv(self, x):
        """Queries, keys and values by head, [batch, heads, seq, head_dim], before the
        rotary embedding: where a family that normalises them per head (qwen3) does so."""
        batch, seq, _ = x.shape
        # named for remat policies (save_qkv_proj keeps them under scan)
        q = checkpoint_name(self.q_proj(x), "query_proj")
        k = checkpoint_name(self.k_proj(x), "key_proj")
        v = checkpoint_name(self.v_proj(x), "value_proj")
        q = q.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v


class HeadsToHidden(nn.Linear):
    """The attention's output projection (an `nn.Linear` from heads x head_dim to hidden,
    as checkpoints and HF name it) applied to the heads as attention returns them,
    [batch, heads, seq, head_dim], in one einsum with no transpose of the activations.

    Its weight is used through `weight_by_head`, a weightless point a sharding preset may
    pin (replicated under FSDP: the layer gathers the weight whole once). Left to the
    partitioner, libtpu gathered it twice in backward, once for the recomputed forward and
    once in the transposed layout the input gradient wants (llama-8b on v5p-128: 32 extra
    gathers of 32 MiB a step); pinned, both read one gather, as MaxText's do."""

    def __init__(self, heads: int, head_dim: int, hidden: int):
        super().__init__(heads * head_dim, hidden, bias=False)
        self.weight_by_head = SplitHeads(heads, head_dim)

    def forward(self, heads_out):
        # without autograd, detached: a view of a parameter made under no_grad still
        # requires grad, and module hooks that track tensors for backward (FlopCounterMode's)
        # fail on one passed between modules
        weight = self.weight if torch.is_grad_enabled() else self.weight.detach()
        return torch.einsum("bnsd,hnd->bsh", heads_out, self.weight_by_head(weight))

    def features(self, heads_out):
        """[batch, heads, seq, head_dim] -> [batch, seq, heads x head_dim], the layout an
        `nn.Linear` takes: what a LoRA adapter on this layer reads (core/lora.py)."""
        return heads_out.transpose(1, 2).flatten(2)


class SplitHeads(nn.Module):
    """[rows, heads x head_dim] -> [rows, heads, head_dim]: a view, as a module so that
    sharding presets can name (and pin) its output."""

    def __init__(self, heads: int, head_dim: int):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim

    def forward(self, weight):
        return weight.view(weight.shape[0], self.heads, self.head_dim)


class LlamaMLP(nn.Module):
    def __init__(self, config: LlamaConfig, intermediate_size: int | None = None):
        """SwiGLU of `intermediate_size` (default the config's; deepseek3's dense layers and
        shared experts have their own)."""
        super().__init__()
        inner = intermediate_size or config.intermediate_size
        self.gate_proj = nn.Linear(config.hidden_size, inner, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, inner, bias=False)
        self.down_proj = nn.Linear(inner, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    attention_cls: type[LlamaAttention] = LlamaAttention  # a family's own (qwen3's QK-norm)

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.self_attn = self.attention_cls(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, cos, sin, segment_ids=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, segment_ids)
        return x + self.mlp(self.post_attention_layernorm(x))


class TokenEmbedding(nn.Embedding):
    """nn.Embedding whose lookup and gradient read one int32 copy of the flattened ids.
    Under FSDP the table is split on its hidden dim, so the partitioner gathers every id for
    the lookup; torch's embedding backward re-derives the ids for its scatter, and they were
    gathered a second time (4 MiB a step on llama-8b, v5p-128, 128 x 8192)."""

    def forward(self, input_ids):
        ids = input_ids.reshape(-1).to(torch.int32)
        return _Lookup.apply(self.weight, ids).view(*input_ids.shape, -1)


class _Lookup(torch.autograd.Function):
    """Rows of `table` at `ids`; the gradient adds each row's gradient at the same ids."""

    @staticmethod
    def forward(ctx, table, ids):
        ctx.save_for_backward(ids)
        ctx.rows = table.shape[0]
        return table.index_select(0, ids)

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        return grad.new_zeros(ctx.rows, grad.shape[-1]).index_add(0, ids, grad), None


class LlamaModel(nn.Module):
    """Embeddings, the decoder layers (`layer_cls`, e.g. a mixture-of-experts layer) and the
    final norm.

    Packed rows (several documents per row) pass `segment_ids` [batch, seq], which keep
    each document's attention within it, and `positions` [batch, seq], each document's own
    positions from 0, so its rotary angles are those it has alone."""

    def __init__(self, config: LlamaConfig, layer_cls: type[nn.Module] = LlamaDecoderLayer):
        super().__init__()
        self.embed_tokens = TokenEmbedding(config.vocab_size, config.hidden_size)
        self.layers = LayerStack([layer_cls(config) for _ in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.register_buffer("inv_freq", rope_inverse_frequencies(config), persistent=False)

    def forward(self, input_ids, segment_ids=None, positions=None):
        hidden = self.embed(input_ids)
        return self.norm(self.layers(hidden, *self.layer_extras(input_ids, hidden.dtype,
                                                                segment_ids, positions)))

    def embed(self, input_ids):
        """The tokens' embeddings (a family may scale them: gemma3)."""
        return self.embed_tokens(input_ids)

    def layer_extras(self, input_ids, dtype, segment_ids, positions) -> tuple:
        """What every layer takes besides the hidden states: the rotary tables, and the
        segment ids of packed rows (none for rows of one document)."""
        cos, sin = self.rotary_tables(input_ids, dtype, positions)
        return (cos, sin) if segment_ids is None else (cos, sin, segment_ids)

    def rotary_tables(self, input_ids, dtype, positions=None,
                      inv_freq=None) -> tuple[torch.Tensor, ...]:
        """cos and sin of every position's rotary angles: [seq, head_dim] for positions
        0, 1, ...; [batch, 1, seq, head_dim] (one per head) for given `positions`. At the
        model's frequencies, or `inv_freq` (a family whose layers differ: gemma3's local
        layers)."""
        if positions is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        inv_freq = self.inv_freq if inv_freq is None else inv_freq
        freqs = positions.float()[..., None] * inv_freq
        angles = torch.cat((freqs, freqs), dim=-1)
        if angles.dim() == 3:
            angles = angles[:, None]
        return angles.cos().to(dtype), angles.sin().to(dtype)


class LlamaForCausalLM(nn.Module):
    """Decoder + LM head; `forward(input_ids) -> logits`, `loss(logits, labels)` HF-style."""

    model_cls = LlamaModel

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.model = self.model_cls(config)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, segment_ids=None, positions=None):
        return self.logits(self.hidden_states(input_ids, segment_ids, positions))

    @property
    def loss_chunk_tokens(self) -> int:
        return self.config.loss_chunk_tokens

    def hidden_states(self, input_ids, segment_ids=None, positions=None):
        """The final normed hidden states, [batch, seq, hidden]: the loss may apply the LM
        head to them a chunk at a time."""
        return self.model(input_ids, segment_ids, positions)

    def logits(self, hidden):
        if self.config.tie_word_embeddings:
            return hidden @ self.model.embed_tokens.weight.t()
        return self.lm_head(hidden)

    def init_weights(self, seed: int = 0) -> None:
        """Normal(0, initializer_range) for matrices, ones for norms (HF's scheme), seeded."""
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("norm.weight"):
                    param.fill_(1.0)
                else:
                    values = torch.randn(param.shape, generator=generator)
                    param.copy_(values * self.config.initializer_range)
