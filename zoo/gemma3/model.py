"""Gemma 3 (text): zoo/common's decoder with Gemma's differences, parameter names equal to
transformers' `Gemma3ForCausalLM`:

- RMS norms scale by (1 + weight), in fp32, weights starting at zero;
- each layer norms its attention and MLP outputs as well as their inputs (four norms);
- queries and keys are RMS-normed per head (QK-norm); scores scale by
  query_pre_attn_scalar**-0.5;
- the MLP is GeGLU (tanh-approximated GELU);
- embeddings are multiplied by sqrt(hidden), rounded to the activation dtype;
- local layers attend within a sliding window, with rotary base 10k; every sixth layer is
  global, with base 1M (and a linear factor from 4b up).

A layer's window is a buffer, so the layers stay alike to a scan, which slices the buffer
per layer as it does the weights (core/remat.py). Attention is the masked product on every
backend: the keys outside a local layer's window are computed and masked, and the FLOP count
(the decoder's, zoo/common/decoder_costs.py) counts them, as executed. torch_xla's splash
kernel takes a window, but a static one, which a scanned layer's data is not
(docs/models.md)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from zoo.common.attention import QKNormAttention
from zoo.common.decoder import DecoderForCausalLM, DecoderModel
from zoo.common.feed_forward import SwiGLU
from zoo.gemma3.config import GLOBAL, Gemma3Config


class Gemma3RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(size))
        self.eps = eps

    def forward(self, x):
        # (x * (1 + w)) in fp32, then the activation dtype (Llama casts before the product)
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * (1.0 + self.weight.float())).to(x.dtype)


class Gemma3Attention(QKNormAttention):
    norm_cls = Gemma3RMSNorm

    def __init__(self, config: Gemma3Config):
        super().__init__(config)
        # causal_attention scales by head_dim**-0.5; the queries make up the difference
        self.query_scale = math.sqrt(self.head_dim / config.query_pre_attn_scalar)

    def heads_qkv(self, x):
        q, k, v = super().heads_qkv(x)
        return (q * self.query_scale if self.query_scale != 1.0 else q), k, v


class Gemma3MLP(SwiGLU):
    """GeGLU: SwiGLU's matrices with tanh-approximated GELU."""

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, config: Gemma3Config):
        super().__init__()
        self.self_attn = Gemma3Attention(config)
        self.mlp = Gemma3MLP(config)
        for name in ("input_layernorm", "post_attention_layernorm",
                     "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            setattr(self, name, Gemma3RMSNorm(config.hidden_size, config.rms_norm_eps))
        # keys a query sees (0: all before it, a global layer); set by the model per layer
        self.register_buffer("attention_window", torch.tensor(0, dtype=torch.int32),
                             persistent=False)

    def forward(self, x, cos_global, sin_global, cos_local, sin_local, segment_ids=None):
        local = self.attention_window > 0
        cos = torch.where(local, cos_local, cos_global)
        sin = torch.where(local, sin_local, sin_global)
        attended = self.self_attn(self.input_layernorm(x), cos, sin, segment_ids,
                                  self.attention_window)
        x = x + self.post_attention_layernorm(attended)
        mlp = self.mlp(self.pre_feedforward_layernorm(x))
        return x + self.post_feedforward_layernorm(mlp)


class Gemma3Model(DecoderModel):
    layer_cls = Gemma3DecoderLayer
    norm_cls = Gemma3RMSNorm

    def __init__(self, config: Gemma3Config):
        super().__init__(config)
        self.hidden_size = config.hidden_size
        for layer, kind in zip(self.layers, config.layer_types):
            layer.attention_window.fill_(0 if kind == GLOBAL else config.sliding_window)
        self.inv_freq /= config.rope_linear_factor
        dim = config.dim_per_head
        self.register_buffer("local_inv_freq", 1.0 / config.rope_local_theta ** (
            torch.arange(0, dim, 2, dtype=torch.float) / dim), persistent=False)

    def embed(self, input_ids):
        hidden = self.embed_tokens(input_ids)
        # the scale rounded to the activation dtype first, as Gemma's reference does; a
        # Python number, so the step's graph holds it as a constant
        return hidden * torch.tensor(self.hidden_size ** 0.5, dtype=hidden.dtype).item()

    def layer_extras(self, input_ids, dtype, segment_ids, positions) -> tuple:
        """Both layer kinds' rotary tables (each layer picks its own), and segment ids."""
        tables = (*self.rotary_tables(input_ids, dtype, positions),
                  *self.rotary_tables(input_ids, dtype, positions, self.local_inv_freq))
        return tables if segment_ids is None else (*tables, segment_ids)


class Gemma3ForCausalLM(DecoderForCausalLM):
    model_cls = Gemma3Model

    def init_weights(self, seed: int = 0) -> None:
        """The decoder's scheme, with norm weights at zero ((1 + weight) scaling, as
        transformers)."""
        super().init_weights(seed)
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("norm.weight"):
                    param.zero_()
