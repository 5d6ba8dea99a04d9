"""lm-eval on the XLA device with the zoo's own model: `--model zoo-xla` / `--device xla`.

It extends lm-eval's `hf` backend, so requests are tokenized, batched and scored by exactly
the same code; only the forward pass differs: the zoo model (built from the same exported
folder) runs on XLA with every batch padded to a fixed batch size and a length bucket, so
the graph compiles once per bucket instead of once per batch shape.
"""

from __future__ import annotations

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from core.errors import UserError

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
        import torch_xla

        batch, length = inps.shape
        bucket = next((b for b in BUCKETS if b >= length), length)
        padded = torch.full((max(self.fixed_batch, batch), bucket), self.tokenizer.pad_token_id
                            or 0, dtype=inps.dtype)
        padded[:batch, :length] = inps  # right padding: causal positions before it unchanged
        with torch.no_grad():
            logits = self.zoo_model(padded.to(torch_xla.device()))
        # Slice on the host: a device-side slice would compile once per batch shape.
        return logits.float().cpu()[:batch, :length]


def _load_zoo_model(folder: str):
    """The zoo family whose HF class the folder's config.json names, loaded on XLA."""
    import json
    from pathlib import Path

    import torch_xla

    from zoo.registry import family_for_hf_architecture

    config = json.loads((Path(folder) / "config.json").read_text())
    family = family_for_hf_architecture((config.get("architectures") or ["?"])[0])
    model = family.build(family.config_from_hf(folder), init=False)
    family.load_hf(model, folder)
    return model.eval().to(torch_xla.device())
