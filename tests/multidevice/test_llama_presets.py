"""Llama: parity with transformers' LlamaForCausalLM on every parity config (eager CPU and
XLA:CPU, scan on/off), every sharding x remat preset on 8 devices vs 1, and loading a
transformers checkpoint directory."""


from tests.support import llama_cases
from tests.support.family_presets import CausalLMPresetTests

# fp32 throughout. Eager CPU runs the same kernels as transformers: only summation order
# differs. XLA:CPU fuses and reorders more, and sharding splits reductions.
EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}


class TestPresets(CausalLMPresetTests):
    cases = llama_cases
    eager_tol = EAGER_TOL

    def test_fsdp_tensor_layout_on_8_devices(self, xla_runs):
        specs = xla_runs[8]["presets"][("fsdp_tensor", "checkpoint")]["specs"]
        # mesh fsdp=4 x tensor=2: column-parallel q_proj has tensor on its output rows.
        assert specs["model.layers.0.self_attn.q_proj.weight"] == "{devices=[2,4]0,2,4,6,1,3,5,7}"
        assert specs["model.layers.0.self_attn.o_proj.weight"] == "{devices=[4,2]0,1,2,3,4,5,6,7}"
        assert specs["model.norm.weight"] == "{replicated}"

