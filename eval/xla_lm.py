"""lm-eval on the XLA device with the zoo's own model: `--model zoo-xla` / `--device xla`.

It extends lm-eval's `hf` backend, so requests are tokenized, batched and scored by exactly
the same code; only the forward pass differs: the zoo model (built from the same exported
folder) runs on XLA with every batch padded to a fixed batch size and a length bucket, so
the graph compiles once per bucket instead of once per batch shape. Causal LMs score the
concatenated request; seq2seq models (T5) encode the context and score the continuation by
teacher forcing, as transformers does when given `labels`.
"""

from __future__ import annotations

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from core.backends.xla.runtime import device
from core.errors import UserError
from core.hf import read_config
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
        self.zoo_model = _load_zoo_model(pretrained)

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

    def _fixed_shape(self, tensor: torch.Tensor, fill: int) -> torch.Tensor:
        """[b, n] padded with `fill` to [the fixed batch, n's length bucket], on XLA."""
        batch, length = tensor.shape
        bucket = next((b for b in BUCKETS if b >= length), length)
        padded = torch.full((max(self.fixed_batch, batch), bucket), fill, dtype=tensor.dtype)
        padded[:batch, :length] = tensor
        return padded.to(device())


def _load_zoo_model(folder: str):
    """The zoo family whose HF class the folder's config.json names, loaded on XLA."""
    config = read_config(folder)
    family = family_for_hf_architecture((config.get("architectures") or ["?"])[0])
    model = family.build(family.config_from_hf(folder), init=False)
    family.load_hf(model, folder)
    return model.eval().to(device())
