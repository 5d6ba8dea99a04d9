"""How a model reads a prompt and takes one more token: the two shapes of model the sampler
serves, chosen by the cache layout (a layout with cross layers is an encoder-decoder's).
Each answers with the hidden state the next token is drawn from, [rows, hidden]."""

from __future__ import annotations

import torch

from core.sampler.cache import GenerationCache, LayerLayout


class DecoderOnly:
    """A decoder (`hidden_states(ids, segment_ids, positions)`): the prompt is the start of
    its sequence, so the first new token sits at the prompt's length."""

    @staticmethod
    def first_columns(lengths: torch.Tensor) -> torch.Tensor:
        return lengths

    @staticmethod
    def prefill(model, cache: GenerationCache, ids, lengths) -> torch.Tensor:
        with cache.prefill(lengths):
            hidden = model.hidden_states(ids)
        index = (lengths - 1)[:, None, None].expand(-1, 1, hidden.shape[-1])
        return hidden.gather(1, index)[:, 0]

    @staticmethod
    def step(model, cache: GenerationCache, last, cur) -> torch.Tensor:
        with cache.decode(cur):
            return model.hidden_states(last[:, None].long(), None, cur[:, None])[:, 0]


class EncoderDecoder:
    """An encoder-decoder (`encode(ids, mask)`, `decoder_hidden_states(ids, positions,
    encoded, encoder_mask)`, `config.decoder_start_token_id`): the prompt is encoded once,
    its keys cached by the cross layers; the decoder starts from its start token at column
    0, so the first new token sits at column 1. A decode step passes `positions` and no
    encoding: the model reads the cache's key and source positions."""

    @staticmethod
    def first_columns(lengths: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(lengths)

    @staticmethod
    def prefill(model, cache: GenerationCache, ids, lengths) -> torch.Tensor:
        mask = torch.arange(ids.shape[1], device=ids.device)[None, :] < lengths[:, None]
        encoded = model.encode(ids, mask)
        start = torch.full_like(ids[:, :1], model.config.decoder_start_token_id)
        with cache.prefill(torch.ones_like(lengths), source_lengths=lengths):
            return model.decoder_hidden_states(start, None, encoded, mask)[:, 0]

    @staticmethod
    def step(model, cache: GenerationCache, last, cur) -> torch.Tensor:
        with cache.decode(cur):
            return model.decoder_hidden_states(last[:, None].long(), cur[:, None])[:, 0]


def prompting_for(layout: list[LayerLayout]) -> type[DecoderOnly] | type[EncoderDecoder]:
    return EncoderDecoder if any(layer.cross for layer in layout) else DecoderOnly
