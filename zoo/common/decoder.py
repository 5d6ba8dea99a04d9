"""The decoder stack a family's model is made of: a pre-norm layer (attention, then an MLP,
each around a residual), the model (embeddings, layers, final norm, rotary tables) and the
causal LM (LM head, weight init). A family names its own classes by subclassing these and
setting the `*_cls` attributes; parameter names are transformers' `LlamaForCausalLM`'s.
No sharding calls and no host syncs: the whole forward is one XLA graph."""

from __future__ import annotations

import torch
from torch import nn

from core.remat import LayerStack
from zoo.common.attention import Attention
from zoo.common.decoder_config import DecoderConfig
from zoo.common.embedding import TokenEmbedding
from zoo.common.feed_forward import SwiGLU
from zoo.common.norms import RMSNorm
from zoo.common.rope import rope_inverse_frequencies, rotary_tables


class DecoderLayer(nn.Module):
    attention_cls: type[nn.Module] = Attention  # a family's own (qwen3's QK-norm)
    mlp_cls: type[nn.Module] = SwiGLU
    norm_cls: type[nn.Module] = RMSNorm

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.self_attn = self.attention_cls(config)
        self.mlp = self.mlp_cls(config)
        self.input_layernorm = self.norm_cls(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = self.norm_cls(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, cos, sin, segment_ids=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, segment_ids)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderModel(nn.Module):
    """Embeddings, the decoder layers (`layer_cls`, e.g. a mixture-of-experts layer) and the
    final norm.

    Packed rows (several documents per row) pass `segment_ids` [batch, seq], which keep
    each document's attention within it, and `positions` [batch, seq], each document's own
    positions from 0, so its rotary angles are those it has alone."""

    layer_cls: type[nn.Module] = DecoderLayer
    norm_cls: type[nn.Module] = RMSNorm

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.embed_tokens = TokenEmbedding(config.vocab_size, config.hidden_size)
        self.layers = LayerStack([self.layer_cls(config)
                                  for _ in range(config.num_hidden_layers)])
        self.norm = self.norm_cls(config.hidden_size, config.rms_norm_eps)
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
        """cos and sin of every position's rotary angles (zoo/common/rope.py), at the model's
        frequencies or `inv_freq` (a family whose layers differ: gemma3's local layers)."""
        inv_freq = self.inv_freq if inv_freq is None else inv_freq
        return rotary_tables(input_ids, inv_freq, dtype, positions)


class DecoderForCausalLM(nn.Module):
    """Decoder + LM head; `forward(input_ids) -> logits`, `loss(logits, labels)` HF-style."""

    model_cls: type[nn.Module] = DecoderModel

    def __init__(self, config: DecoderConfig):
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
