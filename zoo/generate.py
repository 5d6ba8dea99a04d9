"""Sample text from a trained run or checkpoint on the host CPU (no torch_xla needed)."""

from __future__ import annotations

from pathlib import Path

import torch


def load_for_generation(path: str | Path):
    """(model in eval mode, tokenizer) from a run folder or one of its checkpoints."""
    from zoo.core.checkpoint import load_checkpoint
    from zoo.core.data import load_tokenizer
    from zoo.saved_run import checkpoint_of, load_run

    family, cfg, _ = load_run(path)
    model = family.build(cfg.model, init=False)
    model.load_state_dict(load_checkpoint(checkpoint_of(path)))
    return model.eval(), load_tokenizer(cfg.data.tokenizer)


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompt: str,
    max_new_tokens: int = 50,
    temperature: float = 0.0,
    top_k: int = 0,
    seed: int = 0,
) -> str:
    """Greedy when temperature is 0, else top-k (0 = all) sampling at that temperature."""
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    generator = torch.Generator().manual_seed(seed)
    for _ in range(max_new_tokens):
        logits = model(ids)[0, -1].float()
        if temperature <= 0:
            token = logits.argmax()
        else:
            if top_k:
                threshold = logits.topk(min(top_k, logits.numel())).values[-1]
                logits = logits.masked_fill(logits < threshold, float("-inf"))
            probs = (logits / temperature).softmax(-1)
            token = torch.multinomial(probs, 1, generator=generator)[0]
        ids = torch.cat([ids, token.view(1, 1)], dim=1)
        if token.item() == tokenizer.eos_token_id:
            break
    return tokenizer.decode(ids[0], skip_special_tokens=True)
