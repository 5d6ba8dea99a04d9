"""The device sampler (core/sampler, eager on the CPU) against transformers' `generate` on the
same weights: greedy fp32 tokens equal for prompts of different lengths in two prompt
buckets, and the sampler's log-probs equal the trainer's forward on prompt + completion
(issue 63 item 4 in miniature), for every family with a cache layout."""

import dataclasses

import pytest
import torch
import transformers

from core.remat import RematConfig, apply_remat
from core.sampler import Sampler, SamplerShape, SamplingParams
from tests.support import (
    deepseek3_cases,
    gemma3_cases,
    llama_cases,
    mixtral_cases,
    qwen3_cases,
    qwen3moe_cases,
)

NEW_TOKENS = 32
PROMPTS = [[5, 17, 42], [7, 3, 99, 150, 23, 8, 61], [200, 1, 9, 77, 31, 64, 12, 5, 88, 19, 2, 4]]
SHAPE = SamplerShape(rows=2, slots=16 + NEW_TOKENS, buckets=(8, 16))  # two prompt buckets
CASES = {
    "llama": (llama_cases.FAMILY, llama_cases.CONFIG),
    "qwen3": (qwen3_cases.FAMILY, qwen3_cases.CONFIG),
    "qwen3moe": (qwen3moe_cases.FAMILY, qwen3moe_cases.PARITY_CONFIGS["renormalised"]),
    "mixtral": (mixtral_cases.FAMILY, mixtral_cases.PARITY_CONFIGS["capacity"]),
    # windows 8 and 5 < prompt + new tokens: the local layers' rings wrap
    "gemma3": (gemma3_cases.FAMILY, gemma3_cases.PARITY_CONFIGS["tied"]),
    "gemma3_untied": (gemma3_cases.FAMILY, gemma3_cases.PARITY_CONFIGS["untied"]),
    # the cache holds MLA's latent; compressed queries and YaRN positions
    "deepseek3": (deepseek3_cases.FAMILY, deepseek3_cases.PARITY_CONFIGS["grouped"]),
    "deepseek3_lite_yarn": (deepseek3_cases.FAMILY, deepseek3_cases.PARITY_CONFIGS["lite_yarn"]),
}


def hf_twin(family, config, ours):
    hf_config = family.hf_config(config)
    theirs = getattr(transformers, family.hf_class)(hf_config).eval()
    theirs.load_state_dict(ours.state_dict(), strict=not config.tie_word_embeddings)
    theirs.generation_config.eos_token_id = None  # 32 new tokens whatever they are
    return theirs


def hf_greedy(theirs, prompt) -> tuple[list[int], torch.Tensor]:
    """transformers' greedy tokens for one prompt, and each step's scores."""
    out = theirs.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt)),
                          do_sample=False, max_new_tokens=NEW_TOKENS, output_scores=True,
                          return_dict_in_generate=True, pad_token_id=0)
    return out.sequences[0, len(prompt):].tolist(), torch.stack(out.scores)[:, 0]


def assert_same_tokens(ours: list[int], theirs: list[int], scores: torch.Tensor) -> None:
    """Equal tokens; at a divergence, transformers' top-2 margin tells a tie from a bug."""
    if ours == theirs:
        return
    step = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)
    top2 = scores[step].topk(2).values
    pytest.fail(f"tokens differ first at new token {step}: ours {ours[step]}, transformers "
                f"{theirs[step]} (its top-2 margin {float(top2[0] - top2[1]):.2e})")


SLOW = {"gemma3_untied", "deepseek3_lite_yarn"}  # the default suite's CPU is tight


@pytest.fixture(scope="module", params=[
    pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else []) for name in CASES])
def models(request):
    family, config = CASES[request.param]
    config = dataclasses.replace(config, attention="plain")
    ours = family.build(config, seed=0)
    return family, config, ours, hf_twin(family, config, ours)


def generate(family, config, model, params=None):
    params = params or SamplingParams(max_new_tokens=NEW_TOKENS)
    return Sampler(model, family.cache_layout(config), shape=SHAPE).generate(PROMPTS, params)


def test_greedy_tokens_equal_transformers_generate(models):
    family, config, ours, theirs = models
    completions = generate(family, config, ours)
    assert completions.finish == ["length"] * len(PROMPTS)
    assert completions.timings.new_tokens == NEW_TOKENS * len(PROMPTS)
    for prompt, tokens in zip(PROMPTS, completions.tokens, strict=True):
        expected, scores = hf_greedy(theirs, prompt)
        assert_same_tokens(tokens, expected, scores)


def test_logprobs_equal_the_trainers_forward(models):
    """Sampled at temperature 0.7 with a top-k cut: each token's log-prob is
    log_softmax(logits / T) of the training forward over prompt + completion."""
    family, config, ours, _ = models
    params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.7, top_k=20, seed=3)
    completions = generate(family, config, ours, params)
    ours.eval()
    for prompt, tokens, logprobs in zip(PROMPTS, completions.tokens, completions.logprobs,
                                        strict=True):
        with torch.no_grad():
            logits = ours(torch.tensor([prompt + tokens]))[0, len(prompt) - 1:-1]
        expected = torch.log_softmax(logits.float() / 0.7, -1).gather(
            -1, torch.tensor(tokens)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(logprobs), expected, atol=1e-5, rtol=0)


def test_stacked_weights_give_the_same_tokens():
    """A scan preset's stacked weights (one template module for all layers) take their
    caches in call order: the same tokens as per-layer modules (llama's layers; every family
    stacks them alike)."""
    family, config = CASES["llama"]
    ours = family.build(config, seed=0)
    stacked = family.build(config, seed=0)
    apply_remat(stacked, RematConfig(scan=list(family.layer_stacks)))
    assert generate(family, config, stacked).tokens == generate(family, config, ours).tokens


def decode(ids: list[int]) -> str:
    """Token ids as text where no id's text is inside another's: "<5><17>"."""
    return "".join(f"<{i}>" for i in ids)


def test_stop_ids_and_strings_end_rows_early():
    """A stop id ends a row at its first occurrence (on the device), a stop string spanning
    two tokens at the token that completes it (on the host, every `check_every` tokens);
    the rows that meet neither run to the limit."""
    family, config = CASES["llama"]
    model = family.build(config, seed=0)
    full = generate(family, config, model).tokens
    stop_id = full[0][5]
    by_id = generate(family, config, model,
                     SamplingParams(max_new_tokens=NEW_TOKENS, stop_token_ids=(stop_id,)))
    for tokens, ended in zip(full, by_id.tokens, strict=True):
        cut = tokens.index(stop_id) + 1 if stop_id in tokens else NEW_TOKENS
        assert ended == tokens[:cut]
    assert by_id.finish[0] == "stop"
    stop = decode(full[1][8:10])
    by_string = Sampler(model, family.cache_layout(config), shape=SHAPE).generate(
        PROMPTS, SamplingParams(max_new_tokens=NEW_TOKENS, stop_strings=(stop,), check_every=4),
        decode=decode)
    first = decode(full[1]).index(stop)
    assert len(decode(full[1][:10])) == first + len(stop)  # its first occurrence
    assert by_string.tokens[1] == full[1][:10] and by_string.finish[1] == "stop"
    for row in (0, 2):
        if stop not in decode(full[row]):
            assert by_string.tokens[row] == full[row] and by_string.finish[row] == "length"
