"""core/sampler's token choice (filters as transformers' warpers, greedy, log-probs, the
counter-based noise), its stop-string matcher, and its one-line refusals of bad settings."""

import pytest
import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from core.errors import UserError
from core.sampler.params import SamplerShape, SamplingParams
from core.sampler.sampling import choose, filter_logits, uniform
from core.sampler.stops import StopMatcher

VOCAB = 50


def random_logits(rows=16, ties=False, seed=0):
    logits = torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 2
    return (logits * 2).round() / 2 if ties else logits  # halves: many equal logits


def draw(logits, temperature=1.0, top_k=0, top_p=1.0, seed=0, ids=None, index=None):
    rows = logits.shape[0]
    return choose(logits, greedy=temperature == 0, temperature=torch.tensor(temperature),
                  top_k=top_k, top_p=top_p, seed=torch.tensor(seed),
                  sample_ids=torch.arange(rows) if ids is None else ids,
                  index=torch.zeros(rows, dtype=torch.int32) if index is None else index)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("top_k", [1, 5, 20])
def test_top_k_keeps_what_transformers_keeps(top_k, ties):
    logits = random_logits(ties=ties)
    theirs = TopKLogitsWarper(top_k)(None, logits.clone())
    assert torch.equal(filter_logits(logits, top_k, 1.0).isfinite(), theirs.isfinite())


@pytest.mark.parametrize("top_p", [0.1, 0.5, 0.9, 0.99])
def test_top_p_keeps_what_transformers_keeps(top_p):
    logits = random_logits()
    theirs = TopPLogitsWarper(top_p)(None, logits.clone())
    assert torch.equal(filter_logits(logits, 0, top_p).isfinite(), theirs.isfinite())


def test_top_p_keeps_ties_at_the_cut_where_transformers_keeps_them_before_it():
    """Equal logits at the cut are all kept (transformers keeps those its sort puts first):
    what it keeps is kept here too, and nothing else but the equals of its smallest kept."""
    logits = random_logits(ties=True)
    ours = filter_logits(logits, 0, 0.7).isfinite()
    theirs = TopPLogitsWarper(0.7)(None, logits.clone()).isfinite()
    assert (ours | ~theirs).all()
    smallest_kept = torch.where(theirs, logits, torch.inf).amin(-1, keepdim=True)
    assert torch.equal(ours, theirs | (logits == smallest_kept))


def test_top_k_one_is_greedy_at_any_temperature():
    logits = random_logits()
    greedy, _ = draw(logits, temperature=0)
    assert torch.equal(greedy, logits.argmax(-1).int())
    for temperature in (0.5, 1.0, 3.0):
        assert torch.equal(draw(logits, temperature, top_k=1)[0], greedy)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_logprobs_are_the_full_vocabulary_log_softmax_at_the_temperature(temperature):
    logits = random_logits()
    tokens, logprobs = draw(logits, temperature, top_k=10, top_p=0.9)
    scaled = logits / (temperature or 1.0)
    expected = torch.log_softmax(scaled, -1).gather(-1, tokens.long()[:, None])[:, 0]
    torch.testing.assert_close(logprobs, expected)


def test_noise_depends_on_seed_sample_id_and_index_only():
    ids, index = torch.tensor([3, 5, 8]), torch.tensor([0, 4, 4])
    first = uniform(torch.tensor(7), ids, index, VOCAB)
    assert torch.equal(first, uniform(torch.tensor(7), ids, index, VOCAB))
    # the rows in another order, in another batch: each row's noise is its own
    reordered = uniform(torch.tensor(7), ids.flip(0), index.flip(0), VOCAB)
    assert torch.equal(reordered, first.flip(0))
    assert torch.equal(uniform(torch.tensor(7), ids[1:2], index[1:2], VOCAB), first[1:2])
    for changed in (uniform(torch.tensor(8), ids, index, VOCAB),
                    uniform(torch.tensor(7), ids + 1, index, VOCAB),
                    uniform(torch.tensor(7), ids, index + 1, VOCAB)):
        assert (changed != first).float().mean() > 0.99


def test_noise_is_uniform_and_draws_follow_the_softmax():
    u = uniform(torch.tensor(0), torch.arange(2000), torch.zeros(2000), VOCAB)
    assert 0 < u.min() and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.01
    rows = 20000
    logits = torch.tensor([[1.0, 0.0, -1.0]]).expand(rows, 3)
    tokens, _ = draw(logits, ids=torch.arange(rows))
    frequencies = torch.bincount(tokens.long(), minlength=3).float() / rows
    probs = torch.softmax(logits[0], -1)
    sigma = (probs * (1 - probs) / rows).sqrt()
    assert ((frequencies - probs).abs() < 3 * sigma).all(), (frequencies, probs)


def test_stop_strings_end_at_the_token_that_completes_them():
    matcher = StopMatcher(["User:", "\n"], decode=lambda ids: "".join(map(chr, ids)))
    text = [ord(c) for c in "Hi Us"]
    assert matcher.match(0, text) is None
    assert matcher.match(0, text + [ord("e"), ord("r")]) is None
    assert matcher.match(0, text + [ord(c) for c in "er: more"]) == len("Hi User:")
    assert matcher.match(1, [ord(c) for c in "a\nb"]) == 2


@pytest.mark.parametrize("settings, message", [
    (dict(temperature=-0.5), "temperature -0.5 is below 0"),
    (dict(top_p=0.0), r"top_p 0.0 is outside \(0, 1\]"),
    (dict(top_p=1.5), r"top_p 1.5 is outside \(0, 1\]"),
    (dict(top_k=-1), "top_k -1 is below 0"),
    (dict(stop_strings=("User:", "")), "a stop string is empty"),
    (dict(max_new_tokens=0), "max_new_tokens 0 is below 1"),
])
def test_bad_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(UserError, match=message) as refused:
        SamplingParams(**{"max_new_tokens": 8, **settings})
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("lengths, positions, message", [
    ([3, 20], None, "a prompt of 20 tokens .bucket 32. and 8 new tokens need 40 cache slots; "
                    "the sampler has 24"),
    ([3, 40], None, "a prompt of 40 tokens is longer than the longest prompt bucket"),
    ([3, 10], 12, "a prompt of 10 tokens and 8 new tokens pass the model's 12 positions"),
    ([3, 0], None, "a prompt is empty"),
])
def test_prompts_that_do_not_fit_are_refused_in_one_line(lengths, positions, message):
    shape = SamplerShape(rows=2, slots=24, buckets=(16, 32))
    with pytest.raises(UserError, match=message):
        SamplingParams(max_new_tokens=8).check(shape, lengths, positions)
