"""Qwen3: parity with transformers' Qwen3ForCausalLM (loss, logits, every gradient; eager
CPU and XLA:CPU, scan on/off), every sharding x remat preset on 8 devices vs 1, and loading
a transformers checkpoint directory."""


from tests.support import qwen3_cases
from tests.support.family_presets import CausalLMPresetTests

EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}


class TestPresets(CausalLMPresetTests):
    cases = qwen3_cases
    eager_tol = EAGER_TOL

