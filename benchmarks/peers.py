"""Reference implementations run through the same trainer, runtime and presets, so a step
time ratio isolates what the zoo's model code buys. Each takes the zoo config and returns a
module with the zoo model's forward signature and parameter names (so the zoo's sharding
presets apply unchanged)."""

from __future__ import annotations

import torch


def hf_llama(config, seed: int = 0):
    """transformers' LlamaForCausalLM, returning logits like ours."""
    import transformers  # transformers

    class LlamaLogits(transformers.LlamaForCausalLM):
        def forward(self, input_ids):
            return super().forward(input_ids=input_ids, use_cache=False).logits

    torch.manual_seed(seed)
    hf_config = config.to_hf()
    hf_config.use_cache = False
    return LlamaLogits(hf_config)


def hf_t5(config, seed: int = 0):
    """transformers' T5ForConditionalGeneration with T5 v1.1's separate LM head (transformers
    5 ties it when built from a config)."""
    import transformers  # transformers

    class T5Logits(transformers.T5ForConditionalGeneration):
        def forward(self, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask):
            return super().forward(
                input_ids=input_ids, attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
                decoder_attention_mask=decoder_attention_mask, use_cache=False).logits

    torch.manual_seed(seed)
    model = T5Logits(config.to_hf())
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    model.encoder.embed_tokens = model.decoder.embed_tokens = model.shared  # one `shared`
    return model


def hf_vit(config, seed: int = 0):
    """transformers' ViTForImageClassification, returning logits like ours."""
    import transformers  # transformers

    class ViTLogits(transformers.ViTForImageClassification):
        def forward(self, pixel_values):
            return super().forward(pixel_values=pixel_values).logits

    torch.manual_seed(seed)
    return ViTLogits(config.to_hf())


PEERS = {"hf": {"llama": hf_llama, "t5": hf_t5, "vit": hf_vit}}
# Families without an HF peer, and why.
PEERS_MISSING = {
    "mixtral": "transformers' Mixtral picks each expert's tokens with data-dependent shapes "
    "(nonzero), which XLA cannot compile once and replay",
}
