"""The qwen3moe configurations and batch that tests/multidevice/test_qwen3moe_presets.py and
tests/support/preset_worker.py share: parity with transformers' Qwen3MoeForCausalLM (which
never drops a token) with and without the chosen experts' weights renormalised, and the
presets on a capacity config that drops tokens, as mixtral's (tests/support/mixtral_cases.py)."""

import dataclasses

from tests.support.mixtral_cases import MESHES, REMATS, batch, forward  # noqa: F401 (the worker reads them)
from tests.support.mixtral_cases import SMALL as MIXTRAL_SMALL
from zoo.qwen3moe.config import Qwen3MoeConfig
from zoo.qwen3moe.family import FAMILY  # noqa: F401 (the worker reads it)

SMALL = Qwen3MoeConfig(**{f.name: getattr(MIXTRAL_SMALL, f.name)
                          for f in dataclasses.fields(MIXTRAL_SMALL)})
SMALL = dataclasses.replace(SMALL, head_dim=32, rms_norm_eps=1e-6)
PARITY_CONFIGS = {
    # capacity_factor = experts / k: an expert can take every token of a sequence
    "renormalised": dataclasses.replace(SMALL, capacity_factor=2.0),
    "raw_top_k": dataclasses.replace(SMALL, capacity_factor=2.0, norm_topk_prob=False),
}
CONFIG = dataclasses.replace(SMALL, capacity_factor=1.0)  # drops some assignments
# by default (the rest are slow): mixtral's routing and experts under qwen3's attention, so
# their own presets test the rest; experts over `expert`, scanned
DEFAULT_PRESETS = [("fsdp_expert", "scan")]
