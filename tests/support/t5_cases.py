"""The T5 configuration and batch that tests/multidevice/test_t5_presets.py and
tests/support/preset_worker.py share."""

import torch

from core.mesh import MeshConfig
from zoo.data.text_pairs import pair_batch
from zoo.t5.config import T5Config
from zoo.t5.family import FAMILY  # noqa: F401 (the worker reads it)
from zoo.t5.hf import EMBEDDING_ALIASES
from zoo.tasks.seq2seq import SEQ2SEQ

CONFIG = T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                  num_decoder_layers=3, num_heads=4, relative_attention_num_buckets=8,
                  relative_attention_max_distance=16)
PARITY_CONFIGS = {"t5": CONFIG}
MESHES = {"fsdp": MeshConfig(), "fsdp_tensor": MeshConfig(tensor=2)}
REMATS = ["none", "checkpoint", "scan", "scan_checkpoint"]
# by default (the rest are slow): unrolled, scanned, and fsdp_tensor with a remat barrier
DEFAULT_PRESETS = [("fsdp", "none"), ("fsdp", "scan"), ("fsdp_tensor", "checkpoint")]


def batch():
    """Inputs and targets of different lengths, with padding in both."""
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randint(3, 96, (8, 20), generator=generator)
    targets = torch.randint(3, 96, (8, 12), generator=generator)
    inputs[1, 11:], targets[2, 7:], targets[5, 3:] = 0, 0, 0
    return pair_batch(inputs, targets, pad=0)


def forward(model, b):
    logits = model(b["input_ids"], b["attention_mask"], b["decoder_input_ids"],
                   b["decoder_attention_mask"])
    return SEQ2SEQ.loss(model, b)[0], logits


def hf_model(ours, config=CONFIG):
    """transformers' T5 with our weights. transformers 5 ties T5's LM head to the embedding
    when built from a config (it unties on loading a checkpoint that has both), so untie it
    here: T5 v1.1 has a separate head."""
    import transformers  # here: the device-side workers import this module too

    hf = transformers.T5ForConditionalGeneration(config.to_hf()).eval()
    hf.lm_head.weight = torch.nn.Parameter(torch.empty_like(hf.lm_head.weight))
    state = ours.state_dict()
    hf.load_state_dict({**state, **{alias: state["shared.weight"] for alias in EMBEDDING_ALIASES}})
    return hf


def hf_greedy(theirs, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """transformers' greedy new tokens for each prompt, no EOS stopping them. Without its
    cache: transformers 5.24's T5 cache holds `num_layers` decoder layers, too few for a
    decoder deeper than its encoder (the cases' CONFIG)."""
    theirs.generation_config.eos_token_id = None
    return [theirs.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt)),
                            do_sample=False, max_new_tokens=new_tokens,
                            use_cache=False)[0, 1:].tolist()  # after the start token
            for prompt in prompts]
