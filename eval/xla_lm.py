"""lm-eval on the XLA device with the zoo's own model: `--model zoo-xla` / `--device xla`.

It extends lm-eval's `hf` backend, so requests are tokenized, batched and scored by exactly
the same code; only the forward pass differs: the zoo model (built from the same exported
folder) runs on XLA with every batch padded to a fixed batch size and a length bucket, so
the graph compiles once per bucket instead of once per batch shape. Causal LMs score the
concatenated request; seq2seq models (T5) encode the context and score the continuation by
teacher forcing, as transformers does when given `labels`. Generating tasks (generate_until)
continue their contexts with zoo's device sampler (core/sampler) on the same model, either
kind: one prefill graph per prompt bucket and one decode step for every task.
"""

from __future__ import annotations

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from core.backends.xla import XlaBackend
from core.backends.xla.runtime import device
from core.errors import UserError
from core.hf import read_config
from core.sampler import Sampler, SamplerShape, SamplingParams
from zoo.registry import family_for_hf_architecture

BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)


@register_model("zoo-xla")
class ZooXLALM(HFLM):
    def __init__(self, pretrained: str, batch_size: int | str = 8, **kwargs):
        if not str(batch_size).isdigit():
            raise UserError("zoo-xla needs a fixed integer --batch-size (shapes are static)")
        super().__init__(pretrained=pretrained, device="cpu", batch_size=int(batch_size),
                         **kwargs)
        self._model.to("meta")  # the HF copy only answers config questions from now on
        self.fixed_batch = int(batch_size)
        self.zoo_model, self._family, self._zoo_config = _load_zoo_model(pretrained)
        self.sampler: Sampler | None = None

    def _model_call(self, inps: torch.Tensor, attn_mask=None, labels=None) -> torch.Tensor:
        pad = self.tokenizer.pad_token_id or 0
        with torch.no_grad():
            if labels is None:  # causal: right padding leaves earlier positions unchanged
                scored = inps
                logits = self.zoo_model(self._fixed_shape(inps, pad))
            else:
                scored = labels
                start = torch.full_like(labels[:, :1], self.config.decoder_start_token_id)
                decoder_inputs = torch.cat([start, labels[:, :-1]], dim=1)
                logits = self.zoo_model(
                    self._fixed_shape(inps, pad), self._fixed_shape(attn_mask, 0),
                    self._fixed_shape(decoder_inputs, pad),
                    self._fixed_shape(torch.ones_like(labels), 0),
                )
        batch, length = scored.shape
        # Slice on the host: a device-side slice would compile once per batch shape.
        return logits.float().cpu()[:batch, :length]

    def _model_generate(self, context: torch.Tensor, max_length: int, stop: list[str],
                        attention_mask: torch.Tensor | None = None,
                        **generation_kwargs) -> torch.Tensor:
        """lm-eval's batch of left-padded contexts continued by the device sampler, as
        transformers' `generate` answers it: each row right-padded, a causal LM's the context
        as given then its new tokens (up to max_length in all), a seq2seq model's the
        decoder's start token then its new tokens (max_length counts the decoder's tokens).
        `stop` strings and EOS end a row."""
        mask = torch.ones_like(context) if attention_mask is None else attention_mask
        prompts = [row[kept.bool()].tolist() for row, kept in zip(context, mask, strict=True)]
        causal = self.backend == "causal"
        eos = self.tokenizer.eos_token_id
        params = SamplingParams(
            max_new_tokens=max_length - (context.shape[1] if causal else 1),
            temperature=float(generation_kwargs.get("temperature") or 0.0)
            if generation_kwargs.get("do_sample") else 0.0,
            top_k=int(generation_kwargs.get("top_k") or 0),
            top_p=float(generation_kwargs.get("top_p") or 1.0),
            stop_token_ids=() if eos is None else (eos,), stop_strings=tuple(stop))
        pad = self.tokenizer.pad_token_id or 0
        out = self._sampler_for(max(map(len, prompts)), params.max_new_tokens).generate(
            prompts, params, decode=self.tok_decode, pad_id=pad)
        starts = (context.tolist() if causal
                  else [[self.config.decoder_start_token_id]] * len(prompts))
        rows = [start + new for start, new in zip(starts, out.tokens, strict=True)]
        width = max(map(len, rows))
        return torch.tensor([row + [pad] * (width - len(row)) for row in rows])

    def _sampler_for(self, longest: int, max_new_tokens: int) -> Sampler:
        """The sampler, made at the first generating request with room for a causal LM's
        max_length tokens (one decode graph serves every task; a seq2seq model has no such
        bound, lm-eval's is its tokenizer's), made again only for a request that needs
        more."""
        shape = SamplerShape.for_model(None, self.fixed_batch, max_new_tokens, longest)
        if self.sampler is None or shape.slots > self.sampler.shape.slots:
            slots = max(shape.slots, self.max_length if self.backend == "causal" else 0)
            if self._family.cache_layout is None:
                raise UserError(f"{self._family.name} has no device sampler yet, and its "
                                "generating tasks need one with --device xla; run them with "
                                "--device cpu or cuda")
            layout = self._family.cache_layout(self._zoo_config)
            self.sampler = Sampler(self.zoo_model, layout, backend=_OneDevice(),
                                   shape=SamplerShape(shape.rows, slots))
        return self.sampler

    def _fixed_shape(self, tensor: torch.Tensor, fill: int) -> torch.Tensor:
        """[b, n] padded with `fill` to [the fixed batch, n's length bucket], on XLA."""
        batch, length = tensor.shape
        bucket = next((b for b in BUCKETS if b >= length), length)
        padded = torch.full((max(self.fixed_batch, batch), bucket), fill, dtype=tensor.dtype)
        padded[:batch, :length] = tensor
        return padded.to(device())


class _OneDevice(XlaBackend):
    """The xla backend on the one device lm-eval's model sits on, unsharded (no SPMD mesh):
    the sampler's buffers and rows sent there whole."""

    def sampler_buffer(self, shape: tuple[int, ...], dtype: torch.dtype, spec: tuple,
                       mesh: object) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype).to(device())

    def place_rows(self, batch: dict, mesh: object) -> dict:
        return {key: value.to(device()) for key, value in batch.items()}

    def host_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.cpu()


def _load_zoo_model(folder: str):
    """(the zoo model whose HF class the folder's config.json names, loaded on XLA, its
    family, its config)."""
    config = read_config(folder)
    family = family_for_hf_architecture((config.get("architectures") or ["?"])[0])
    model_config = family.config_from_hf(folder)
    model = family.build(model_config, init=False)
    family.load_hf(model, folder)
    return model.eval().to(device()), family, model_config
