"""The deepseek3 configurations and batch that tests/multidevice/test_deepseek3_presets.py
and tests/support/preset_worker.py share: parity with transformers' DeepseekV3ForCausalLM
(which never drops a token) with compressed queries, a dense first layer and grouped
routing; without query compression, with YaRN positions and one group;
the presets on a capacity config that drops tokens, as mixtral's."""

import dataclasses

from core.mesh import MeshConfig
from tests.support.llama_cases import VOCAB, batch  # noqa: F401 (the worker reads batch)
from tests.support.mixtral_cases import forward  # noqa: F401 (the worker reads it)
from zoo.deepseek3.config import DeepseekV3Config
from zoo.deepseek3.family import FAMILY  # noqa: F401 (the worker reads it)

SMALL = DeepseekV3Config(
    vocab_size=VOCAB, hidden_size=64, dense_intermediate_size=96, intermediate_size=32,
    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, num_local_experts=8,
    num_experts_per_tok=2, n_group=2, topk_group=1, q_lora_rank=16, kv_lora_rank=16,
    qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, capacity_factor=4.0)
PARITY_CONFIGS = {
    # capacity_factor = experts / k: an expert can take every token of a sequence
    "grouped": SMALL,
    "lite_yarn": dataclasses.replace(
        SMALL, q_lora_rank=0, n_group=1, topk_group=1, n_shared_experts=2,
        routed_scaling_factor=1.0, rope_factor=4.0, rope_original_max_position_embeddings=16,
        max_position_embeddings=64,
        rope_mscale_all_dim=1.0),
}
CONFIG = dataclasses.replace(SMALL, capacity_factor=1.0)  # drops some assignments
MESHES = {"fsdp": MeshConfig(), "fsdp_expert": MeshConfig(expert=2)}
REMATS = ["none", "checkpoint", "scan", "scan_checkpoint"]
# by default (the rest are slow): experts over `expert`, the dense layer unrolled before the
# scan of the routed ones, recomputed in backward
DEFAULT_PRESETS = [("fsdp_expert", "scan_checkpoint")]

