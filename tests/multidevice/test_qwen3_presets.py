"""Qwen3: parity with transformers' Qwen3ForCausalLM (loss, logits, every gradient; eager
CPU and XLA:CPU, scan on/off), every sharding x remat preset on 8 devices vs 1, and loading
a transformers checkpoint directory."""

import torch
import transformers

from tests.support import qwen3_cases
from tests.support.family_presets import FamilyPresetTests
from tests.support.qwen3_cases import CONFIG, batch
from zoo.qwen3.family import FAMILY

EAGER_TOL = {"rtol": 1e-5, "atol": 1e-6}


class TestPresets(FamilyPresetTests):
    cases = qwen3_cases
    eager_tol = EAGER_TOL

    @staticmethod
    def hf_reference(config) -> dict:
        ours = FAMILY.build(config, seed=0)
        hf = transformers.Qwen3ForCausalLM(config.to_hf()).eval()
        hf.load_state_dict(ours.state_dict(), strict=not config.tie_word_embeddings)
        b = batch()
        out = hf(input_ids=b["input_ids"], labels=b["labels"])
        out.loss.backward()
        grads = {n: p.grad for n, p in hf.named_parameters()}
        return {"loss": out.loss.detach(), "logits": out.logits.detach(), "grads": grads}


def test_hf_checkpoint_directory_loads(tmp_path):
    hf = transformers.Qwen3ForCausalLM(CONFIG.to_hf()).eval()
    hf.save_pretrained(tmp_path)
    config = FAMILY.config_from_hf(str(tmp_path))
    assert config == CONFIG
    model = FAMILY.build(config, init=False)
    FAMILY.load_hf(model, str(tmp_path))
    ids = batch()["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(input_ids=ids).logits, **EAGER_TOL)
