"""lm-eval's own `hf` backend, with the LM head that a transformers 5 quirk swaps put back.

transformers 5 ties T5's LM head to the token embedding whatever config.json says. Loading
unties them when the checkpoint holds both, but lm-eval calls `tie_weights()` again after
loading, so a T5 v1.1 (an untied head: every zoo T5, every Flan-T5) would be scored with its
embedding as the head. Models whose head really is tied are left alone.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lm_eval.models.huggingface import HFLM

from core.hf import read_safetensor
from eval.export import adapter_base, tokenizer_folder

HEAD = "lm_head.weight"


def hf_lm(folder: Path, backend: str, device: str, batch_size: int):
    """lm-eval's model for a Hugging Face folder, or for a PEFT adapter folder over its
    base."""
    base = adapter_base(folder)
    if base is None:
        lm = HFLM(pretrained=str(folder), backend=backend, device=device, batch_size=batch_size)
        restore_untied_head(lm.model, folder)
        return lm
    return HFLM(pretrained=base, peft=str(folder), tokenizer=tokenizer_folder(folder),
                backend=backend, device=device, batch_size=batch_size)


def restore_untied_head(model, folder: Path) -> None:
    """Give the model the checkpoint's own head if a later tie replaced it."""
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or head.weight is not embedding.weight:
        return
    stored = read_safetensor(folder, HEAD)
    if stored is None or torch.equal(stored, embedding.weight.detach().cpu().to(stored.dtype)):
        return
    head.weight = torch.nn.Parameter(stored.to(embedding.weight), requires_grad=False)

