"""Grouped-query attention with rotary embeddings (Llama's), its per-head QK-norm variant
(Qwen3's, Gemma 3's), and the output projection that reads heads as attention returns them."""

from __future__ import annotations

import torch
from torch import nn

from core.attention import attention_at_positions, causal_attention
from core.backends.xla.ops import flash_attention
from core.remat import checkpoint_name
from zoo.common.decoder_config import DecoderConfig
from zoo.common.norms import RMSNorm
from zoo.common.rope import apply_rope


class Attention(nn.Module):
    # the sampler's cache (core/sampler/cache.py) while it generates; None in training
    kv_cache = None

    def __init__(self, config: DecoderConfig):
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
        if self.kv_cache is not None:
            cached = self.kv_cache.next().update(k=k.transpose(1, 2), v=v.transpose(1, 2))
            if cached is not None:  # a decode step: attend over the whole cache
                return self.o_proj(attention_at_positions(
                    q, cached.streams["k"], cached.streams["v"], cached.query_positions,
                    cached.key_positions, window))
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


class QKNormAttention(Attention):
    """Queries and keys RMS-normed per head before the rotary embedding (`q_norm`, `k_norm`:
    [head_dim] each), by `norm_cls` (a family's own norm: gemma3's)."""

    norm_cls: type[nn.Module] = RMSNorm

    def __init__(self, config: DecoderConfig):
        super().__init__(config)
        self.q_norm = self.norm_cls(self.head_dim, config.rms_norm_eps)
        self.k_norm = self.norm_cls(self.head_dim, config.rms_norm_eps)

    def heads_qkv(self, x):
        q, k, v = super().heads_qkv(x)
        return self.q_norm(q), self.k_norm(k), v


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
