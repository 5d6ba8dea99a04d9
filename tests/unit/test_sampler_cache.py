"""The sampler's attention over a cache (`attention_at_positions`) against the training
attention, and the cache's call-order hand-out refusing a forward that skips or repeats a
layer."""

import pytest
import torch

from core.attention import attention_at_positions, plain_causal_attention
from core.sampler.cache import CacheOrderError, GenerationCache, LayerLayout, Stream
from core.sampler.placement import OnDevice

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
                           placement=OnDevice(torch.device("cpu")))


def test_a_forward_that_skips_a_layer_is_refused():
    cache = two_layer_cache()
    with pytest.raises(CacheOrderError, match="used 1 layer caches of 2"):
        with cache.prefill(torch.tensor(LENGTHS)):
            cache.next()


def test_a_forward_that_repeats_a_layer_is_refused():
    cache = two_layer_cache()
    with pytest.raises(CacheOrderError, match="more than the 2 layer caches"):
        with cache.prefill(torch.tensor(LENGTHS)):
            for _ in range(3):
                cache.next()


def test_decode_writes_each_rows_column_at_its_position():
    cache = two_layer_cache()
    columns = torch.randn(BATCH, 1, KV_HEADS, DIM)
    cursor = torch.tensor([4, 0, 9])
    with cache.decode(cursor):
        cached = cache.next().update(k=columns, v=columns)
        cache.next().update(k=columns, v=columns)
    for row, column in enumerate(cursor.tolist()):
        torch.testing.assert_close(cached.streams["k"][row, column], columns[row, 0])
    assert torch.equal(cached.query_positions, cursor[:, None])


def test_a_window_as_long_as_the_cache_needs_no_ring():
    layer = LayerLayout((Stream("k", (KV_HEADS, DIM), ()),), window=4)
    cache = GenerationCache([layer], rows=3, slots=4, dtype=torch.float32,
                            placement=OnDevice(torch.device("cpu")))
    assert cache.layers[0].ring == 0 and not cache.ring_positions


def test_a_ring_keeps_each_slots_latest_prompt_position_then_wraps():
    """Window 4, prompts shorter than it, as long and longer (slot s: the latest prompt
    position p with p mod 4 = s); a decode step writes position p at slot p mod 4."""
    per_token = (KV_HEADS, DIM)
    layer = LayerLayout((Stream("k", per_token, ()),), window=4)
    cache = GenerationCache([layer], rows=3, slots=12, dtype=torch.float32,
                            placement=OnDevice(torch.device("cpu")))
    keys = torch.arange(SEQ, dtype=torch.float32)[None, :, None, None].expand(3, SEQ, *per_token)
    with cache.prefill(torch.tensor([3, 4, 9])):
        assert cache.next().update(k=keys) is None
    expected = torch.tensor([[0, 1, 2, -1], [0, 1, 2, 3], [8, 5, 6, 7]])
    assert torch.equal(cache.ring_positions[4], expected)
    stored = cache.layers[0].streams["k"][:, :, 0, 0]
    assert torch.equal(stored, expected.clamp(min=0).float())
    with cache.decode(torch.tensor([3, 4, 9])):
        cached = cache.next().update(k=torch.full((3, 1, *per_token), -5.0))
    assert torch.equal(cached.key_positions, torch.tensor([[0, 1, 2, 3], [4, 1, 2, 3],
                                                           [8, 9, 6, 7]]))
    assert torch.equal(cached.streams["k"][:, :, 0, 0],
                       torch.tensor([[0, 1, 2, -5], [-5, 1, 2, 3], [8, -5, 6, 7]]).float())


def test_a_cross_layer_keeps_the_encoded_prompt_and_its_padding_unseen():
    """The prefill writes the encoded prompt (its `source_lengths` columns seen at position 0,
    the rest -1); a decode step reads it unchanged and may not write it."""
    streams = (Stream("k", (KV_HEADS, DIM), ()), Stream("v", (KV_HEADS, DIM), ()))
    cache = GenerationCache([LayerLayout(streams), LayerLayout(streams, cross=True)], rows=3,
                            slots=SEQ, dtype=torch.float32,
                            placement=OnDevice(torch.device("cpu")))
    encoded = torch.randn(BATCH, 7, KV_HEADS, DIM)
    first = torch.randn(BATCH, 1, KV_HEADS, DIM)
    with cache.prefill(torch.ones(BATCH, dtype=torch.long), torch.tensor([7, 2, 5])):
        cache.next().update(k=first, v=first)
        cross = cache.next()
        assert cross.read() is None
        assert cross.update(k=encoded, v=encoded) is None
    with cache.decode(torch.tensor([1, 1, 1])):
        cache.next().update(k=first, v=first)
        cached = cache.next().read()
    torch.testing.assert_close(cached.streams["k"][:, :7], encoded)
    assert cached.key_positions.tolist() == [[0] * 7 + [-1] * 3, [0] * 2 + [-1] * 8,
                                             [0] * 5 + [-1] * 5]
    with pytest.raises(CacheOrderError, match="decode step wrote a cross-attention cache"):
        cross.update(k=first, v=first)
    with pytest.raises(CacheOrderError, match="only a cross-attention layer"):
        cache.layers[0].read()
