"""The llama configurations and batch that tests/multidevice/test_llama_presets.py and
tests/support/preset_worker.py share: parity with transformers on four small configs (full
and grouped-query attention, tied embeddings, scaled rope), the presets on the GQA one."""

import torch

from core.mesh import MeshConfig
from zoo.llama.config import LlamaConfig, RopeScaling
from zoo.llama.family import FAMILY  # noqa: F401 (the worker reads it)
from zoo.tasks.causal_lm import causal_lm_loss

VOCAB = 256
SMALL = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
    num_attention_heads=4
)
PARITY_CONFIGS = {
    "mha": LlamaConfig(**SMALL, num_key_value_heads=4),
    "gqa": LlamaConfig(**SMALL, num_key_value_heads=2),
    "tied": LlamaConfig(**SMALL, num_key_value_heads=2, tie_word_embeddings=True),
    "rope_scaling": LlamaConfig(
        **SMALL,
        num_key_value_heads=1,
        rope_scaling=RopeScaling(factor=8.0, original_max_position_embeddings=16),
    ),
}
CONFIG = PARITY_CONFIGS["gqa"]
MESHES = {"fsdp": MeshConfig(), "fsdp_tensor": MeshConfig(tensor=2),
          "fsdp_context": MeshConfig(sequence=2)}
REMATS = ["none", "checkpoint", "scan", "scan_checkpoint"]


def batch():
    """Every parity config has the same vocabulary, so one batch serves them all."""
    ids = torch.randint(0, VOCAB, (8, 32), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[0, :5] = -100  # masked positions must not count
    return {"input_ids": ids, "labels": labels}


def forward(model, b):
    logits = model(b["input_ids"])
    return causal_lm_loss(logits, b["labels"]), logits
