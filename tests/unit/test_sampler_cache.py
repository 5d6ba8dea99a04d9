"""The sampler's attention over a cache (`attention_at_positions`) against the training
attention, and the cache's call-order hand-out refusing a forward that skips or repeats a
layer."""

import pytest
import torch

from core.attention import attention_at_positions, plain_causal_attention
from core.sampler.cache import CacheOrderError, GenerationCache, LayerLayout, Stream

BATCH, HEADS, KV_HEADS, SEQ, DIM = 3, 4, 2, 10, 8
LENGTHS = [10, 6, 1]  # right-padded rows


def qkv():
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(BATCH, HEADS, SEQ, DIM, generator=generator)
    k, v = (torch.randn(BATCH, KV_HEADS, SEQ, DIM, generator=generator) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("window", [None, torch.tensor(3)])
def test_attention_at_positions_equals_the_training_attention(window):
    """Keys at positions 0..len-1 of each row, the padding's columns empty (-1): each real
    query attends as the causal training attention does."""
    q, k, v = qkv()
    groups = HEADS // KV_HEADS
    expected = plain_causal_attention(q, k.repeat_interleave(groups, 1),
                                      v.repeat_interleave(groups, 1), window=window)
    positions = torch.arange(SEQ).expand(BATCH, SEQ)
    key_positions = torch.where(positions < torch.tensor(LENGTHS)[:, None], positions, -1)
    ours = attention_at_positions(q, k.transpose(1, 2), v.transpose(1, 2), positions,
                                  key_positions, window)
    for row, length in enumerate(LENGTHS):
        torch.testing.assert_close(ours[row, :, :length], expected[row, :, :length])


def test_a_query_that_sees_no_key_gives_no_nan():
    q, k, v = qkv()
    nothing = torch.full((BATCH, SEQ), -1)
    out = attention_at_positions(q, k.transpose(1, 2), v.transpose(1, 2),
                                 torch.zeros(BATCH, 1, dtype=torch.long), nothing)
    assert out.isfinite().all()


def two_layer_cache():
    per_token = (KV_HEADS, DIM)
    spec = ("batch", None, "tensor", None)
    layer = LayerLayout((Stream("k", per_token, spec), Stream("v", per_token, spec)))
    return GenerationCache([layer, layer], rows=BATCH, slots=SEQ, dtype=torch.float32,
                           device=torch.device("cpu"))


def test_a_forward_that_skips_a_layer_is_refused():
    cache = two_layer_cache()
    with pytest.raises(CacheOrderError, match="used 1 layer caches of 2"):
        with cache.forward_pass():
            cache.next()


def test_a_forward_that_repeats_a_layer_is_refused():
    cache = two_layer_cache()
    with pytest.raises(CacheOrderError, match="more than the 2 layer caches"):
        with cache.forward_pass():
            for _ in range(3):
                cache.next()


def test_decode_writes_each_rows_column_at_its_position():
    cache = two_layer_cache()
    columns = torch.randn(BATCH, 1, KV_HEADS, DIM)
    cursor = torch.tensor([4, 0, 9])
    with cache.forward_pass(cursor):
        cached = cache.next().update(k=columns, v=columns)
        cache.next().update(k=columns, v=columns)
    for row, column in enumerate(cursor.tolist()):
        torch.testing.assert_close(cached.streams["k"][row, column], columns[row, 0])
    assert torch.equal(cached.query_positions, cursor[:, None])
