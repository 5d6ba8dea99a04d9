"""The mixtral configurations and batch that tests/multidevice/test_mixtral_presets.py and
tests/support/preset_worker.py share: parity with transformers (which never drops a token)
for both dispatches with room for every token, and the presets on a capacity config that
does drop tokens (one group per sequence, so what is dropped does not depend on devices)."""

import dataclasses

from core.mesh import MeshConfig
from tests.support.llama_cases import VOCAB, batch  # noqa: F401 (the worker reads batch)
from zoo.mixtral.config import MixtralConfig
from zoo.mixtral.family import FAMILY  # noqa: F401 (the worker reads it)
from zoo.tasks.causal_lm import causal_lm_loss

SMALL = MixtralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=48,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.02)
PARITY_CONFIGS = {
    # capacity_factor = experts / k: an expert can take every token of a sequence
    "capacity": dataclasses.replace(SMALL, capacity_factor=2.0),
    "dense": dataclasses.replace(SMALL, dispatch="dense"),
    "top1_tied": dataclasses.replace(SMALL, num_experts_per_tok=1, tie_word_embeddings=True,
                                     capacity_factor=4.0),
}
CONFIG = dataclasses.replace(SMALL, capacity_factor=1.0)  # drops some assignments
MESHES = {"fsdp": MeshConfig(), "fsdp_expert": MeshConfig(expert=2),
          "fsdp_context": MeshConfig(sequence=2)}
REMATS = ["none", "checkpoint", "scan", "scan_checkpoint"]
# by default (the rest are slow): unrolled and scanned, and each other sharding with a
# remat barrier; checkpoint and scan_checkpoint under fsdp are llama's layers' (its tests)
# around the same experts, which qwen3moe's presets scan under fsdp_expert too
DEFAULT_PRESETS = [("fsdp", "none"), ("fsdp", "scan"), ("fsdp_expert", "checkpoint"),
                   ("fsdp_context", "checkpoint")]


def forward(model, b):
    """transformers' Mixtral training loss (next-token + weighted load-balancing loss) and
    the logits."""
    logits, router = model.forward_with_router(b["input_ids"])
    aux = model.config.router_aux_loss_coef * router.aux_loss
    return causal_lm_loss(logits, b["labels"]) + aux, logits
