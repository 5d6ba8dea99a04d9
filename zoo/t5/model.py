"""A readable T5 v1.1 encoder-decoder with Hugging Face parameter names.

Relative position bias (bucketed, owned by block 0 of each stack and shared by the others),
RMS-style layer norms without mean or bias, gated-GELU feed-forward, no attention scaling,
no biases, an untied LM head. Names equal `transformers.T5ForConditionalGeneration`'s, so its
safetensors load directly. The token embedding is `shared`; the stacks take embedded inputs
(HF's tied `encoder.embed_tokens` aliases are not separate weights). No host syncs.

Each stack's blocks form a LayerStack, so remat presets can checkpoint every block or scan
the stack. The position bias (plus masks) is computed once per stack from
block 0's table, before the blocks run, and passed to every block as an extra: all blocks run
the same computation. Only their parameters differ: block 0 also holds the table (where HF
names put it). So under scan, block 0 runs on its own and blocks 1..N-1 are one scan (the
stack's alike tail).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from core.remat import LayerStack
from zoo.t5.config import T5Config

MASKED = -1e30  # added to the scores of masked keys (finite: no inf - inf in backward)


class T5LayerNorm(nn.Module):
    """Scale-only RMS norm computed in fp32."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


def relative_position_bucket(relative, bidirectional: bool, buckets: int, max_distance: int):
    """T5's bucketing: exact buckets for small offsets, log-spaced ones up to max_distance."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        bucket = bucket + (relative > 0).long() * buckets
        relative = relative.abs()
    else:
        relative = -torch.clamp(relative, max=0)
    exact = buckets // 2
    large = exact + (
        torch.log(relative.float().clamp(min=1) / exact)
        / math.log(max_distance / exact)
        * (buckets - exact)
    ).long()
    large = torch.clamp(large, max=buckets - 1)
    return bucket + torch.where(relative < exact, relative, large)


class T5Attention(nn.Module):
    def __init__(self, config: T5Config, relative_bias: bool = False, bidirectional=True):
        super().__init__()
        self.heads, self.d_kv = config.num_heads, config.d_kv
        inner = config.num_heads * config.d_kv
        self.q = nn.Linear(config.d_model, inner, bias=False)
        self.k = nn.Linear(config.d_model, inner, bias=False)
        self.v = nn.Linear(config.d_model, inner, bias=False)
        self.o = nn.Linear(inner, config.d_model, bias=False)
        self.bidirectional = bidirectional
        self.buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        if relative_bias:
            self.relative_attention_bias = nn.Embedding(self.buckets, config.num_heads)

    def position_bias(self, relative: torch.Tensor) -> torch.Tensor:
        """[..., heads, queries, keys] learned bias of each key's offset `relative`
        [..., queries, keys] (key position - query position)."""
        bucket = relative_position_bucket(
            relative, self.bidirectional, self.buckets, self.max_distance
        )
        return self.relative_attention_bias(bucket).movedim(-1, -3)

    def forward(self, x, bias, keys=None):
        """`bias`: position bias plus mask, broadcastable to [B, heads, q_len, k_len]."""
        keys = x if keys is None else keys
        return self.attend(self.by_head(self.q(x)), self.by_head(self.k(keys)),
                           self.by_head(self.v(keys)), bias)

    def by_head(self, projected):
        """[B, L, inner] -> [B, L, heads, d_kv] (as a sampler's cache stores keys)."""
        return projected.view(*projected.shape[:2], self.heads, self.d_kv)

    def attend(self, q, k, v, bias):
        # einsum, not @: `@` merges batch and heads, and libtpu then gathers tensor-split heads
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k).float() + bias  # T5: no 1/sqrt(d)
        attended = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1).to(v.dtype), v)
        return self.o(attended.reshape(*attended.shape[:2], self.heads * self.d_kv))


class T5CausalSelfAttention(T5Attention):
    """The decoder's self-attention. While a sampler generates (core/sampler) it writes its
    keys and values to the cache, and a decode step attends over all of the cache, masked
    by the bias the decoder computed from the cached positions."""

    kv_cache = None

    def forward(self, x, bias, keys=None):
        if self.kv_cache is None:
            return super().forward(x, bias)
        q, k, v = self.by_head(self.q(x)), self.by_head(self.k(x)), self.by_head(self.v(x))
        cached = self.kv_cache.next().update(k=k, v=v)
        if cached is not None:
            k, v = cached.streams["k"], cached.streams["v"]
        return self.attend(q, k, v, bias)


class T5CrossAttention(T5Attention):
    """The decoder's attention over the encoder output. While a sampler generates, the
    prefill writes the encoded prompt's keys and values to the cache once and every decode
    step reads them (`keys` is then None)."""

    kv_cache = None

    def forward(self, x, bias, keys=None):
        if self.kv_cache is None:
            return super().forward(x, bias, keys)
        layer = self.kv_cache.next()
        cached = layer.read()
        if cached is None:
            k, v = self.by_head(self.k(keys)), self.by_head(self.v(keys))
            layer.update(k=k, v=v)
        else:
            k, v = cached.streams["k"], cached.streams["v"]
        return self.attend(self.by_head(self.q(x)), k, v, bias)


class T5LayerSelfAttention(nn.Module):
    def __init__(self, config: T5Config, relative_bias: bool, bidirectional: bool):
        super().__init__()
        attention = T5Attention if bidirectional else T5CausalSelfAttention
        self.SelfAttention = attention(config, relative_bias, bidirectional)
        self.layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)

    def forward(self, x, bias):
        return x + self.SelfAttention(self.layer_norm(x), bias)


class T5LayerCrossAttention(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.EncDecAttention = T5CrossAttention(config)
        self.layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)

    def forward(self, x, encoded, mask):
        return x + self.EncDecAttention(self.layer_norm(x), mask, keys=encoded)


class T5DenseGatedActDense(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.wi_0 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wi_1 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)

    def forward(self, x):
        return self.wo(F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x))


class T5LayerFF(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.DenseReluDense = T5DenseGatedActDense(config)
        self.layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)

    def forward(self, x):
        return x + self.DenseReluDense(self.layer_norm(x))


class T5Block(nn.Module):
    """Encoder block: self-attention, feed-forward. Decoder block: self-attention (causal),
    cross-attention over the encoder output, feed-forward."""

    def __init__(self, config: T5Config, is_decoder: bool, relative_bias: bool):
        super().__init__()
        layers = [T5LayerSelfAttention(config, relative_bias, bidirectional=not is_decoder)]
        if is_decoder:
            layers.append(T5LayerCrossAttention(config))
        self.layer = nn.ModuleList([*layers, T5LayerFF(config)])

    def forward(self, x, bias, encoded=None, cross_mask=None):
        """`encoded`: None in a sampler's decode step, whose cross-attention reads its cache."""
        x = self.layer[0](x, bias)
        if cross_mask is not None:
            x = self.layer[1](x, encoded, cross_mask)
        return self.layer[-1](x)


class T5Stack(nn.Module):
    def __init__(self, config: T5Config, is_decoder: bool):
        super().__init__()
        count = config.num_decoder_layers if is_decoder else config.num_layers
        self.is_decoder = is_decoder
        self.block = LayerStack(
            [T5Block(config, is_decoder, relative_bias=i == 0) for i in range(count)]
        )
        self.final_layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)

    def forward(self, embedded, mask, encoded=None, encoder_mask=None):
        """`mask`: [B, L] 1 for real tokens (keys); the decoder adds the causal mask."""
        length = embedded.shape[1]
        keep = mask[:, None, None, :].bool()
        if self.is_decoder:
            keep = keep & torch.ones(length, length, dtype=torch.bool, device=mask.device).tril()
        positions = torch.arange(length, device=embedded.device)
        bias = self.attention_bias(positions[None, :] - positions[:, None])[None]
        bias = torch.where(keep, bias, torch.full_like(bias, MASKED))
        if encoded is None:
            return self.final_layer_norm(self.block(embedded, bias))
        cross = torch.where(encoder_mask[:, None, None, :].bool(), 0.0, MASKED)
        return self.final_layer_norm(self.block(embedded, bias, encoded, cross))

    def decode_step(self, embedded, positions, cache):
        """The decoder on tokens at `positions` [B, L] whose earlier keys and encoded prompt
        are in a sampler's `cache` (core/sampler/cache.py): each query sees the cached
        keys at or before its position, and the prompt's columns."""
        keys = cache.key_positions[:, None, :]
        relative = keys - positions[:, :, None]
        bias = self.attention_bias(relative)
        seen = ((keys >= 0) & (relative <= 0))[:, None]
        bias = torch.where(seen, bias, torch.full_like(bias, MASKED))
        cross = torch.where(cache.source_positions[:, None, None, :] >= 0, 0.0, MASKED)
        return self.final_layer_norm(self.block(embedded, bias, None, cross))

    def attention_bias(self, relative):
        """Block 0's position bias, shared by every block of the stack."""
        return self.block[0].layer[0].SelfAttention.position_bias(relative)


class T5ForConditionalGeneration(nn.Module):
    """`forward(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask)` ->
    logits [B, target_len, vocab] (teacher forcing). A sampler (core/sampler/prompting.py's
    `EncoderDecoder`) calls `encode`, `decoder_hidden_states` and `logits`; while it
    generates, `kv_cache` is its cache."""

    kv_cache = None

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = T5Stack(config, is_decoder=False)
        self.decoder = T5Stack(config, is_decoder=True)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask):
        encoded = self.encode(input_ids, attention_mask)
        decoded = self.decoder(
            self.shared(decoder_input_ids), decoder_attention_mask, encoded, attention_mask
        )
        return self.logits(decoded)

    def encode(self, input_ids, attention_mask):
        return self.encoder(self.shared(input_ids), attention_mask)

    def decoder_hidden_states(self, ids, positions=None, encoded=None, encoder_mask=None):
        """The decoder's output for `ids` [B, L] from their start: over `encoded` (every
        token kept); or, given `positions` and no encoding, a sampler's decode step over its
        cache."""
        if positions is None:
            return self.decoder(self.shared(ids), torch.ones_like(ids), encoded, encoder_mask)
        return self.decoder.decode_step(self.shared(ids), positions, self.kv_cache)

    def logits(self, hidden):
        return self.lm_head(hidden)

    def init_weights(self, seed: int = 0) -> None:
        """HF's T5 scheme (Mesh TensorFlow's), seeded: normal, std = factor / sqrt(fan-in);
        except that the untied LM head also gets 1/sqrt(d_model) (HF: 1), so the first
        logits are O(1) and a small model starts learning at once."""
        c, generator = self.config, torch.Generator().manual_seed(seed)
        factor, inner = c.initializer_factor, c.num_heads * c.d_kv
        fan_in = {
            "shared.weight": 1.0,
            "lm_head.weight": c.d_model,
            ".q.weight": c.d_model * c.d_kv,
            ".k.weight": c.d_model,
            ".v.weight": c.d_model,
            ".o.weight": inner,
            ".relative_attention_bias.weight": c.d_model,
            ".wi_0.weight": c.d_model,
            ".wi_1.weight": c.d_model,
            ".wo.weight": c.d_ff,
        }
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("layer_norm.weight"):
                    param.fill_(factor)
                    continue
                fan = next(v for k, v in fan_in.items() if name.endswith(k))
                values = torch.randn(param.shape, generator=generator)
                param.copy_(values * factor * fan**-0.5)
