"""The gemma3 configurations and batch that tests/multidevice/test_gemma3_presets.py and
tests/support/preset_worker.py share: parity with transformers' Gemma3ForCausalLM with
windows shorter than the batch's rows (so local layers mask), tied embeddings and a query
scale apart from head_dim; untied with a linear rope factor on the global layers and two
local layers to each global one; the presets on the first."""

from core.mesh import MeshConfig
from tests.support.llama_cases import SMALL, batch, forward  # noqa: F401 (the worker reads them)
from zoo.gemma3.config import Gemma3Config
from zoo.gemma3.family import FAMILY  # noqa: F401 (the worker reads it)

PARITY_CONFIGS = {
    "tied": Gemma3Config(**SMALL, num_key_value_heads=2, head_dim=32, sliding_window=8,
                         query_pre_attn_scalar=24),
    "untied": Gemma3Config(**{**SMALL, "num_hidden_layers": 3}, num_key_value_heads=1,
                           head_dim=16, sliding_window=5, sliding_window_pattern=3,
                           rope_linear_factor=8.0, tie_word_embeddings=False),
}
CONFIG = PARITY_CONFIGS["tied"]
MESHES = {"fsdp": MeshConfig(), "fsdp_tensor": MeshConfig(tensor=2)}
REMATS = ["none", "checkpoint", "scan", "scan_checkpoint"]
# by default (the rest are slow): the layers' windows and both rotary tables under scan,
# heads split over tensor
DEFAULT_PRESETS = [("fsdp_tensor", "scan")]
