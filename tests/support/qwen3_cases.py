"""The qwen3 configurations and batch that tests/multidevice/test_qwen3_presets.py and
tests/support/preset_worker.py share: parity with transformers' Qwen3ForCausalLM with its
head_dim apart from hidden / heads (tied embeddings, as the small released sizes, and
untied), the presets on the tied one."""

from core.mesh import MeshConfig
from tests.support.llama_cases import SMALL, batch, forward  # noqa: F401 (the worker reads them)
from zoo.qwen3.config import Qwen3Config
from zoo.qwen3.family import FAMILY  # noqa: F401 (the worker reads it)

PARITY_CONFIGS = {
    "tied": Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=32),
    "untied": Qwen3Config(**SMALL, num_key_value_heads=1, head_dim=8,
                          tie_word_embeddings=False),
}
CONFIG = PARITY_CONFIGS["tied"]
MESHES = {"fsdp": MeshConfig(), "fsdp_tensor": MeshConfig(tensor=2),
          "fsdp_context": MeshConfig(sequence=2)}
REMATS = ["none", "checkpoint", "scan", "scan_checkpoint"]
# by default (the rest are slow): llama's layers, so llama's presets test the rest; this one
# splits the per-head norms' inputs over heads and runs them under scan
DEFAULT_PRESETS = [("fsdp_tensor", "scan")]
