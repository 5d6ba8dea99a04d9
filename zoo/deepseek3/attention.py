"""Multi-head latent attention (DeepSeek-V2/V3): keys and values come from one compressed
latent per token (`kv_lora_rank` wide, RMS-normed) and queries from another (`q_lora_rank`;
none at the lite size); each head's query and key are a part without position
(`qk_nope_head_dim`) and a rotary part (`qk_rope_head_dim`), the key's rotary part shared by
every head. Parameter names are transformers' `DeepseekV3Attention`'s."""

from __future__ import annotations

import torch
from torch import nn

from core.attention import attention_at_positions, causal_attention
from core.remat import checkpoint_name
from zoo.common.norms import RMSNorm
from zoo.common.rope import apply_rope


def apply_interleaved_rope(x, cos, sin):
    """DeepSeek's checkpoints pair rotary dims (0, 1), (2, 3), ...: the pairs rotated, then
    laid out as rotate-half's halves (transformers' `apply_rotary_pos_emb_interleave`)."""
    half = cos.shape[-1] // 2
    cos, sin = cos[..., :half], sin[..., :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat((even * cos - odd * sin, odd * cos + even * sin), dim=-1)


class MultiHeadLatentAttention(nn.Module):
    # the sampler's cache (core/sampler/cache.py) while it generates; None in training
    kv_cache = None

    def __init__(self, config):
        super().__init__()
        self.heads = config.num_attention_heads
        self.nope, self.rope, self.v_dim = (config.qk_nope_head_dim, config.qk_rope_head_dim,
                                            config.v_head_dim)
        self.kv_rank = config.kv_lora_rank
        self.interleaved = config.rope_interleave
        # causal_attention scales by (nope + rope)**-0.5; YaRN's mscale**2 on top (1 without)
        self.query_scale = config.softmax_mscale
        hidden, q_dim = config.hidden_size, self.heads * (self.nope + self.rope)
        if config.q_lora_rank:
            self.q_a_proj = nn.Linear(hidden, config.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(config.q_lora_rank, config.rms_norm_eps)
            self.q_b_proj = nn.Linear(config.q_lora_rank, q_dim, bias=False)
        else:
            self.q_proj = nn.Linear(hidden, q_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, self.kv_rank + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_rank, config.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.kv_rank, self.heads * (self.nope + self.v_dim),
                                   bias=False)
        self.o_proj = nn.Linear(self.heads * self.v_dim, hidden, bias=False)

    def forward(self, x, cos, sin, segment_ids=None):
        batch, seq, _ = x.shape
        if hasattr(self, "q_proj"):
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = checkpoint_name(q, "query_proj").view(batch, seq, self.heads, -1).transpose(1, 2)
        q_nope, q_rope = q.split((self.nope, self.rope), dim=-1)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split((self.kv_rank, self.rope), dim=-1)
        latent = self.kv_a_layernorm(latent)
        rotate = apply_interleaved_rope if self.interleaved else apply_rope
        q_rope, k_rope = rotate(q_rope, cos, sin), rotate(k_rope[:, None], cos, sin)
        q = torch.cat((q_nope, q_rope), dim=-1)
        if self.query_scale != 1.0:
            q = q * self.query_scale
        cached = None
        if self.kv_cache is not None:  # the sampler caches the latent, not keys and values
            cached = self.kv_cache.next().update(latent=latent, k_rope=k_rope[:, 0])
        if cached is not None:  # a decode step: attend over the whole cache
            latent, k_rope = cached.streams["latent"], cached.streams["k_rope"][:, None]
        k, v = self.keys_values(latent, k_rope)
        if cached is None:
            out = causal_attention(q, k, v, segment_ids)
        else:
            out = attention_at_positions(q, k.transpose(1, 2), v.transpose(1, 2),
                                         cached.query_positions, cached.key_positions)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, -1))

    def keys_values(self, latent, k_rope):
        """Per-head keys (no-position part from the latent, the shared rotary part) and
        values, [batch, heads, tokens, dim], from the normed latent [batch, tokens, rank] and
        the rotated key part [batch, 1, tokens, rope]."""
        batch, tokens, _ = latent.shape
        kv = checkpoint_name(self.kv_b_proj(latent), "key_proj")
        kv = kv.view(batch, tokens, self.heads, -1).transpose(1, 2)
        k_nope, v = kv.split((self.nope, self.v_dim), dim=-1)
        return torch.cat((k_nope, k_rope.expand(-1, self.heads, -1, -1)), dim=-1), v
