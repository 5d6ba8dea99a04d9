"""Reference implementations run through the same trainer, runtime and presets, so a step
time ratio isolates what the zoo's model code buys."""

from __future__ import annotations


def hf_llama(config, seed: int = 0):
    """transformers' LlamaForCausalLM for a zoo LlamaConfig, returning logits like ours.

    It has the same parameter names, so the zoo's sharding presets apply unchanged."""
    import torch
    import transformers

    class LlamaLogits(transformers.LlamaForCausalLM):
        def forward(self, input_ids):
            return super().forward(input_ids=input_ids, use_cache=False).logits

    torch.manual_seed(seed)
    hf_config = config.to_hf()
    hf_config.use_cache = False
    return LlamaLogits(hf_config)


PEERS = {"hf": hf_llama}
