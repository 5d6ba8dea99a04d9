"""Gemma 3: parity with transformers' Gemma3ForCausalLM (loss, logits, every gradient;
eager CPU and XLA:CPU, scan on/off), the presets on 8 devices vs 1, and loading a
transformers checkpoint directory."""


from tests.support import gemma3_cases
from tests.support.family_presets import CausalLMPresetTests

EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}


class TestPresets(CausalLMPresetTests):
    cases = gemma3_cases
    eager_tol = EAGER_TOL

