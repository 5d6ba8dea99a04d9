"""`Sampler.trace_decode`: one decode step built as `generate` builds it, for the plans to
compile (benchmarks/plan/decode_step.py). Eager on the CPU here: the state it reads has the
shapes and types the real prefill leaves and its step returns the same (one graph for every
token); through a `Traced` placement every buffer it reads is the placement's, the cache's
as many bytes as core/sampler/footprint.py counts, and nothing can be read back. On a TPU
slice's compiler: tests/multidevice/test_plan_decode.py."""

import dataclasses

import pytest
import torch

from core import backends
from core.sampler import Sampler, SamplerShape, SamplingParams
from core.sampler.footprint import cache_bytes_per_device
from core.sampler.placement import Traced
from tests.support import gemma3_cases, llama_cases, t5_cases

SHAPE = SamplerShape(rows=3, slots=24, buckets=(8, 16))  # gemma3's windows (8, 5) < slots
PARAMS = SamplingParams(max_new_tokens=8, temperature=0.7, top_k=5, stop_token_ids=(1,))
CASES = {"llama": (llama_cases.FAMILY, llama_cases.CONFIG),
         "gemma3": (gemma3_cases.FAMILY, gemma3_cases.PARITY_CONFIGS["tied"]),
         "t5": (t5_cases.FAMILY, t5_cases.CONFIG)}  # an encoder-decoder: cross layers too


def sampler(name, placement=None):
    family, config = CASES[name]
    model = family.build(config, seed=0)
    return Sampler(model, family.cache_layout(config), shape=SHAPE, placement=placement)


def kinds(state) -> list[tuple]:
    return [(f.name, tuple(getattr(state, f.name).shape), getattr(state, f.name).dtype)
            for f in dataclasses.fields(state)]


@pytest.mark.parametrize("name", list(CASES))
def test_the_traced_step_reads_what_the_prefill_leaves_and_returns_the_same(name):
    ours = sampler(name)
    prompts = torch.tensor([[5, 17, 42, 0, 0, 0, 0, 0]] * SHAPE.rows)
    lengths = torch.tensor([3] * SHAPE.rows)
    with ours._generating(), ours._cache() as cache:
        first = ours.prompting.first_columns(lengths)
        prefilled = ours._prefill(cache, prompts, lengths, first, first,
                                  torch.zeros(SHAPE.rows, dtype=torch.bool), first + 8,
                                  ours._draw(PARAMS, [0, 1, 2]))
    traced = ours.trace_decode(PARAMS)
    assert kinds(traced.before) == kinds(prefilled)
    assert kinds(traced.after) == kinds(prefilled)
    assert traced.after.tokens is traced.before.tokens  # updated in place, as the cache


@pytest.mark.parametrize("name", list(CASES))
def test_through_a_traced_placement_every_buffer_is_made_there_and_the_cache_is_as_counted(
        name):
    made = []

    def make(shape, dtype, spec):
        made.append((shape, dtype, spec))
        return torch.zeros(shape, dtype=dtype)

    def rows_spec(shape):
        return ("batch",) + (None,) * (len(shape) - 1)

    placement = Traced(backends.get("xla"), None, make, rows_spec)  # its autocast and run
    ours = sampler(name, placement)
    traced = ours.trace_decode(PARAMS)
    family, config = CASES[name]
    layout = family.cache_layout(config)
    streams = [stream for layer in traced.cache.layers for stream in layer.streams.values()]
    assert len(streams) == sum(len(layer.streams) for layer in layout)
    assert sum(s.numel() * s.element_size() for s in streams) == cache_bytes_per_device(
        layout, SHAPE, 4, {})
    specs = [spec for _, _, spec in made]
    for layer in layout:
        for stream in layer.streams:
            assert stream.spec in specs
    # every row tensor the step reads is the placement's (none made on the host and kept)
    assert all(spec[0] == "batch" for spec in specs)
    with pytest.raises(RuntimeError, match="never runs"):
        placement.host(traced.after.done)
    assert all(p.dtype == torch.float32 for p in ours.model.parameters())  # masters back
