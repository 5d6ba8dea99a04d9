"""Llama: parity with transformers' LlamaForCausalLM on every parity config (eager CPU and
XLA:CPU, scan on/off), every sharding x remat preset on 8 devices vs 1, and loading a
transformers checkpoint directory."""

import torch
import transformers

from tests.support import llama_cases
from tests.support.family_presets import FamilyPresetTests
from tests.support.llama_cases import CONFIG, batch
from zoo.llama.family import FAMILY
from zoo.llama.hf import load_hf

# fp32 throughout. Eager CPU runs the same kernels as transformers: only summation order
# differs. XLA:CPU fuses and reorders more, and sharding splits reductions.
EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}


class TestPresets(FamilyPresetTests):
    cases = llama_cases
    eager_tol = EAGER_TOL

    @staticmethod
    def hf_reference(config) -> dict:
        """transformers' loss, logits and gradients for the same weights and batch."""
        ours = FAMILY.build(config, seed=0)
        hf = transformers.LlamaForCausalLM(config.to_hf()).eval()
        hf.load_state_dict(ours.state_dict(), strict=not config.tie_word_embeddings)
        b = batch()
        out = hf(input_ids=b["input_ids"], labels=b["labels"])
        out.loss.backward()
        grads = {n: p.grad for n, p in hf.named_parameters()}
        return {"loss": out.loss.detach(), "logits": out.logits.detach(), "grads": grads}

    def test_fsdp_tensor_layout_on_8_devices(self, xla_runs):
        specs = xla_runs[8]["presets"][("fsdp_tensor", "checkpoint")]["specs"]
        # mesh fsdp=4 x tensor=2: column-parallel q_proj has tensor on its output rows.
        assert specs["model.layers.0.self_attn.q_proj.weight"] == "{devices=[2,4]0,2,4,6,1,3,5,7}"
        assert specs["model.layers.0.self_attn.o_proj.weight"] == "{devices=[4,2]0,1,2,3,4,5,6,7}"
        assert specs["model.norm.weight"] == "{replicated}"


def test_hf_checkpoint_directory_loads(tmp_path):
    hf = transformers.LlamaForCausalLM(CONFIG.to_hf()).eval()
    hf.save_pretrained(tmp_path)
    model = FAMILY.build(FAMILY.config_from_hf(str(tmp_path)), init=False)
    load_hf(model, str(tmp_path))
    ids = batch()["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(input_ids=ids).logits, **EAGER_TOL)
