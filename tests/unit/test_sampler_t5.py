"""The device sampler (core/sampler, eager on the CPU) on T5, an encoder-decoder: the prompt
encoded once, the decoder's keys and the encoded prompt's cached (zoo/t5/generation.py).
Greedy fp32 tokens equal transformers' `generate` for prompts of different lengths in two
prompt buckets, with more decoder blocks than encoder blocks; log-probs equal the trainer's
teacher-forced forward; a scan preset's stacked weights give the same tokens."""

import pytest
import torch

from core.remat import RematConfig, apply_remat
from core.sampler import Sampler, SamplerShape, SamplingParams
from tests.support.t5_cases import CONFIG, FAMILY, hf_greedy, hf_model

NEW_TOKENS = 32
PROMPTS = [[5, 17, 42], [7, 3, 9, 15, 23, 8, 61], [20, 1, 9, 77, 31, 64, 12, 5, 88, 19, 2, 4]]
SHAPE = SamplerShape(rows=2, slots=16 + NEW_TOKENS, buckets=(8, 16))


@pytest.fixture(scope="module")
def ours():
    return FAMILY.build(CONFIG, seed=0).eval()


def generate(model, params=None):
    params = params or SamplingParams(max_new_tokens=NEW_TOKENS)
    return Sampler(model, FAMILY.cache_layout(CONFIG), shape=SHAPE).generate(PROMPTS, params)


def test_greedy_tokens_equal_transformers_generate(ours):
    assert CONFIG.num_decoder_layers != CONFIG.num_layers
    completions = generate(ours)
    assert completions.finish == ["length"] * len(PROMPTS)
    assert completions.tokens == hf_greedy(hf_model(ours), PROMPTS, NEW_TOKENS)


def test_logprobs_equal_the_trainers_forward(ours):
    """Sampled at temperature 0.7 with a top-k cut: each token's log-prob is
    log_softmax(logits / T) of the teacher-forced forward of the prompt and completion."""
    params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.7, top_k=20, seed=3)
    completions = generate(ours, params)
    for prompt, tokens, logprobs in zip(PROMPTS, completions.tokens, completions.logprobs,
                                        strict=True):
        decoder_ids = torch.tensor([[CONFIG.decoder_start_token_id, *tokens[:-1]]])
        with torch.no_grad():
            logits = ours(torch.tensor([prompt]), torch.ones(1, len(prompt)), decoder_ids,
                          torch.ones_like(decoder_ids))[0]
        expected = torch.log_softmax(logits.float() / 0.7, -1).gather(
            -1, torch.tensor(tokens)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(logprobs), expected, atol=1e-5, rtol=0)


def test_stacked_weights_give_the_same_tokens(ours):
    """Under a scan preset both stacks hold stacked weights (block 0 apart: it owns the
    position bias table); each block still takes its caches in call order."""
    stacked = FAMILY.build(CONFIG, seed=0).eval()
    apply_remat(stacked, RematConfig(scan=list(FAMILY.layer_stacks)))
    assert generate(stacked).tokens == generate(ours).tokens
