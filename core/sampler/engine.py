"""The sampler: batches of prompts generated on the model's device with a static-shape cache.

Prompts are right-padded to a bucket, so a row's positions equal its cache columns; the
prefill is the training forward (one graph per bucket; an encoder-decoder's: the encoder,
then the decoder's start token), then each decode step feeds every row's last token at its
own position. All state a step reads or writes is a device tensor
and no Python number that changes between steps enters it, so on XLA the step traces to the
same graph every token. The host looks at the state only every `check_every` tokens (all
done yet? a stop string?)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence

import torch
from torch import nn

from core.remat import LayerStack
from core.sampler.cache import GenerationCache, LayerLayout
from core.sampler.params import SamplerShape, SamplingParams
from core.sampler.placement import OnBackend, OnDevice
from core.sampler.prompting import prompting_for
from core.sampler.sampling import choose
from core.sampler.stops import StopMatcher


@dataclasses.dataclass
class Timings:
    prefill_s: float = 0.0
    decode_s: float = 0.0
    new_tokens: int = 0
    compiles: int = 0  # graphs the backend compiled during the call (XLA: buckets new + 1)
    compile_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        total = self.prefill_s + self.decode_s
        return self.new_tokens / total if total else 0.0


@dataclasses.dataclass
class Completions:
    """Per prompt, in the order given: its new tokens (up to and including the stop token),
    their log-probs (log_softmax(logits / T) over the full vocabulary, T = 1 when greedy)
    and why it ended: "stop" (a stop id or string) or "length"."""

    tokens: list[list[int]]
    logprobs: list[list[float]]
    finish: list[str]
    timings: Timings


@dataclasses.dataclass
class DecodeState:
    """Everything a decode step reads and writes, [rows] unless noted, all on the device."""

    cur: torch.Tensor  # the column (= position) of `last`, the token fed next
    last: torch.Tensor
    start: torch.Tensor  # the column of the first new token
    limit: torch.Tensor  # start + max_new_tokens
    done: torch.Tensor
    tokens: torch.Tensor  # [rows, slots] int32: each new token at its column
    logprobs: torch.Tensor  # [rows, slots] fp32


@dataclasses.dataclass
class TracedDecode:
    """One decode step built and not run (`Sampler.trace_decode`): what it reads (the cache
    and a state as the prefill leaves it) and its new state. On XLA they are lazy tensors
    whose graph is the decode step `generate` compiles once and runs every token; the
    cache's streams and the state's tokens and log-probs are updated in place."""

    cache: GenerationCache
    before: DecodeState
    after: DecodeState


@dataclasses.dataclass
class TracedPrefill:
    """One prefill built and not run (`Sampler.trace_prefill`): the cache it writes in place
    and the state it leaves (its tokens and log-probs written in place too)."""

    cache: GenerationCache
    state: DecodeState


@dataclasses.dataclass(frozen=True)
class _Draw:
    """What a step samples with: Python choices that pick the graph, tensors that do not."""

    greedy: bool
    top_k: int
    top_p: float
    temperature: torch.Tensor
    seed: torch.Tensor
    sample_ids: torch.Tensor
    stop_ids: torch.Tensor


class Sampler:
    """Generates with `model` (`logits(hidden)`, and a decoder's or an encoder-decoder's
    forward: core/sampler/prompting.py) whose attention writes the cache `layout`
    describes. With a `backend` (and the `mesh` its `prepare` returned) the model is the
    prepared one: cache and state are split by row as its activations are, every forward
    goes through `backend.run` and each step ends with `backend.sync` (XLA: one graph traced
    and run); without one, eagerly on the model's device. `bf16`: the run's evaluation precision
    (`backend.autocast`); log-probs are computed in fp32 either way."""

    def __init__(self, model: nn.Module, layout: list[LayerLayout], *, shape: SamplerShape,
                 backend=None, mesh=None, plan=None, bf16: bool = False, placement=None):
        """`plan`: the parameter plan `backend.prepare` returned, for the weights laid out to
        generate (`backend.sampler_weights`); without it, as the backend trains them.
        `placement`: where tensors are made, when neither the backend's nor the model's
        device (core/sampler/placement.py `Traced`: placeholders, for `trace_decode`)."""
        self.model, self.layout, self.shape, self.bf16 = model, layout, shape, bf16
        self.prompting = prompting_for(layout)
        first = next(model.parameters())
        self.device = first.device
        self.dtype = torch.bfloat16 if bf16 else first.dtype
        self.place = placement or (OnDevice(self.device) if backend is None
                                   else OnBackend(backend, mesh, plan))
        self._compiles_at_start = self.place.compile_stats()

    @property
    def compiles(self) -> tuple[int, float]:
        """(graphs compiled, seconds compiling) since this sampler was made."""
        count, seconds = self.place.compile_stats()
        return count - self._compiles_at_start[0], seconds - self._compiles_at_start[1]

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, *,
                 sample_ids: Sequence[int] | None = None,
                 decode: Callable[[list[int]], str] | None = None,
                 pad_id: int = 0) -> Completions:
        """`sample_ids` name each prompt's random stream (default its index): the same id and
        seed draw the same tokens wherever the row lands. `decode` (token ids -> text) is
        needed for stop strings."""
        if params.stop_strings and decode is None:
            raise ValueError("stop strings need `decode` to read the tokens as text")
        params.check(self.shape, [len(prompt) for prompt in prompts],
                     getattr(getattr(self.model, "config", None), "max_position_embeddings",
                             None))
        ids = list(range(len(prompts))) if sample_ids is None else list(sample_ids)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        tokens: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        finish = [""] * len(prompts)
        timings = Timings()
        compiled_before = self.place.compile_stats()
        with self._generating():
            for first in range(0, len(order), self.shape.rows):
                chunk = order[first:first + self.shape.rows]
                results = self._generate_rows([list(prompts[i]) for i in chunk],
                                              [ids[i] for i in chunk], params, decode,
                                              pad_id, timings)
                for i, (row_tokens, row_logprobs, row_finish) in zip(chunk, results,
                                                                     strict=False):
                    tokens[i], logprobs[i], finish[i] = row_tokens, row_logprobs, row_finish
        timings.new_tokens = sum(map(len, tokens))
        compiled_after = self.place.compile_stats()
        timings.compiles = compiled_after[0] - compiled_before[0]
        timings.compile_s = compiled_after[1] - compiled_before[1]
        return Completions(tokens, logprobs, finish, timings)

    @contextlib.contextmanager
    def _generating(self):
        """Eval mode (dropless MoE dispatch, as transformers), no autograd, each layer
        called on its own; the model's mode restored after."""
        training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), LayerStack.unrolled():
                yield
        finally:
            self.model.train(training)

    def _generate_rows(self, prompts, sample_ids, params, decode, pad_id, timings):
        """One call: `prompts` (at most `rows`, padding rows added as empty and done) through
        a prefill at their bucket and decode steps until every row is done. Every input is
        made on the host and sent; each step is one `sync`, after which the host reads only
        device data (on XLA nothing compiles but the prefill and the step)."""
        rows, place = self.shape.rows, self.place
        bucket = self.shape.bucket(max(map(len, prompts)))
        ids = torch.full((rows, bucket), pad_id, dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, :len(prompt)] = torch.tensor(prompt)
        lengths = torch.tensor([len(p) for p in prompts] + [1] * (rows - len(prompts)))
        padding = torch.arange(rows) >= len(prompts)
        draw = self._draw(params, sample_ids)
        started = time.perf_counter()
        with self._cache() as cache:
            state = place.run(self._prefill, cache,
                              *self._prefill_inputs(ids, lengths, padding, params), draw)
            place.sync()
            all_done = bool(place.host(state.done).all())
            timings.prefill_s += time.perf_counter() - started
            started = time.perf_counter()
            matcher = (StopMatcher(params.stop_strings, decode) if params.stop_strings
                       else None)
            stopped_at: dict[int, int] = {}
            no_hits = self._no_hits()
            hits = no_hits
            steps = 0
            while not all_done:
                for _ in range(max(1, min(params.check_every,
                                          params.max_new_tokens - 1 - steps))):
                    state = place.run(self._decode, cache, state, hits, draw)
                    place.sync()
                    hits, steps = no_hits, steps + 1
                all_done = bool(place.host(state.done).all())
                if matcher is not None:  # a row it ends is done by the next step
                    hits = self._stop_strings(matcher, state, len(prompts), stopped_at)
            timings.decode_s += time.perf_counter() - started
        return self._rows(state, len(prompts), stopped_at, draw)

    def trace_decode(self, params: SamplingParams) -> TracedDecode:
        """One decode step of a `generate` with `params`, built as `generate` builds it (the
        same cache, draw and step) but not run: its inputs are made by this sampler's
        placement, a state of the shapes and types the prefill leaves. With a tracing
        placement (placeholders) nothing is allocated, and the caller takes the step's
        graph (the plans compile it for a slice)."""
        draw = self._draw(params, [])
        with self._generating(), self._cache() as cache:
            before = self._prefilled_state()
            after = self.place.run(self._decode, cache, before, self._no_hits(), draw)
        return TracedDecode(cache, before, after)

    def trace_prefill(self, params: SamplingParams, prompt_tokens: int) -> TracedPrefill:
        """The prefill of a `generate` with `params` whose rows all hold `prompt_tokens`
        tokens (at their bucket), built as `generate` builds it but not run (as
        `trace_decode`): the cache it writes and the state it leaves."""
        rows = self.shape.rows
        ids = torch.zeros((rows, self.shape.bucket(prompt_tokens)), dtype=torch.long)
        lengths = torch.full((rows,), prompt_tokens)
        draw = self._draw(params, [])
        with self._generating(), self._cache() as cache:
            state = self.place.run(self._prefill, cache, *self._prefill_inputs(
                ids, lengths, torch.zeros(rows, dtype=torch.bool), params), draw)
        return TracedPrefill(cache, state)

    def _prefill_inputs(self, ids, lengths, padding, params) -> tuple[torch.Tensor, ...]:
        """The prefill's row inputs on the devices: ids, lengths, the first new column twice
        (as two buffers: one the step moves, cur, one it keeps, start; were they one, the
        first step's graph would take one input where the next steps take two: a second
        compile), padding and each row's limit."""
        place, first = self.place, self.prompting.first_columns(lengths)
        return (place.rows(ids), place.rows(lengths), place.rows(first), place.rows(first),
                place.rows(padding), place.rows(first + params.max_new_tokens))

    def _draw(self, params: SamplingParams, sample_ids: list[int]) -> _Draw:
        """The call's sampling inputs; rows past `sample_ids` (padding) draw with id 0."""
        rows, place = self.shape.rows, self.place
        return _Draw(params.greedy, params.top_k, params.top_p,
                     torch.tensor(params.temperature or 1.0).to(self.device),
                     torch.tensor(params.seed, dtype=torch.int32).to(self.device),
                     place.rows(torch.tensor(sample_ids + [0] * (rows - len(sample_ids)),
                                             dtype=torch.int32)),
                     torch.tensor(params.stop_token_ids, dtype=torch.int32).to(self.device))

    @contextlib.contextmanager
    def _cache(self):
        """A call's cache, bound to the model, in the call's precision: per call, so on XLA
        the weights' casts join each prefill's graph, whichever runs, and the decode step
        reads the cast weights."""
        with self.place.autocast(self.model, self.bf16):
            cache = GenerationCache(self.layout, self.shape.rows, self.shape.slots,
                                    self.dtype, self.place)
            with cache.bind(self.model):
                yield cache

    def _no_hits(self) -> torch.Tensor:
        """[rows] bool: no row ended by a stop string (what most steps are handed)."""
        return self.place.zeros((self.shape.rows,), torch.bool, ("batch",))

    def _new_columns(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The state's [rows, slots] new tokens (int32) and their log-probs (fp32), zeros."""
        shape, spec = (self.shape.rows, self.shape.slots), ("batch", None)  # every process's
        return (self.place.zeros(shape, torch.int32, spec),
                self.place.zeros(shape, torch.float32, spec))

    def _prefilled_state(self) -> DecodeState:
        """A state of the shapes and types `_prefill` returns (positions and limits int64
        as the host's lengths, tokens int32 as `choose` gives them), made by the placement."""
        def per_row(dtype):
            return self.place.rows(torch.zeros(self.shape.rows, dtype=dtype))

        return DecodeState(per_row(torch.long), per_row(torch.int32), per_row(torch.long),
                           per_row(torch.long), per_row(torch.bool), *self._new_columns())

    def _prefill(self, cache, ids, lengths, cur, start, padding, limit, draw) -> DecodeState:
        """The prompts' forward (writing the cache) and each row's first token, sampled from
        the hidden state it follows, placed at its first new column (`cur`, = `start`)."""
        hidden = self.prompting.prefill(self.model, cache, ids, lengths)
        token, logprob = choose(self.model.logits(hidden), greedy=draw.greedy,
                                temperature=draw.temperature, top_k=draw.top_k,
                                top_p=draw.top_p, seed=draw.seed, sample_ids=draw.sample_ids,
                                index=torch.zeros_like(lengths))
        tokens, logprobs = self._new_columns()
        tokens.index_put_((cache.row_index, start), token)
        logprobs.index_put_((cache.row_index, start), logprob)
        done = padding | _stops(token, draw.stop_ids) | (start + 1 >= limit)
        return DecodeState(cur, token, start, limit, done, tokens, logprobs)

    def _decode(self, cache, state: DecodeState, hits, draw) -> DecodeState:
        """One token for every row: the last token at its position in, the next one out. A
        row done before the step keeps its tokens and its place."""
        hidden = self.prompting.step(self.model, cache, state.last, state.cur)
        token, logprob = choose(self.model.logits(hidden), greedy=draw.greedy,
                                temperature=draw.temperature, top_k=draw.top_k,
                                top_p=draw.top_p, seed=draw.seed, sample_ids=draw.sample_ids,
                                index=state.cur + 1 - state.start)
        was_done = state.done | hits
        column = torch.clamp(state.cur + 1, max=self.shape.slots - 1)
        row_index = cache.row_index
        old_token = state.tokens.gather(1, column[:, None])[:, 0]
        old_logprob = state.logprobs.gather(1, column[:, None])[:, 0]
        state.tokens.index_put_((row_index, column), torch.where(was_done, old_token, token))
        state.logprobs.index_put_((row_index, column),
                                  torch.where(was_done, old_logprob, logprob))
        done = was_done | _stops(token, draw.stop_ids) | (state.cur + 2 >= state.limit)
        return dataclasses.replace(state, cur=state.cur + (~was_done).long(),
                                   last=torch.where(was_done, state.last, token), done=done)

    def _stop_strings(self, matcher, state, prompts, stopped_at) -> torch.Tensor:
        """[rows] bool on the device: the rows a stop string ended since the last check
        (their token counts recorded in `stopped_at`)."""
        tokens, cur, start = map(self.place.host, (state.tokens, state.cur, state.start))
        hits = torch.zeros(cur.shape[0], dtype=torch.bool)
        for row in range(prompts):
            if row in stopped_at:
                continue
            count = matcher.match(row, tokens[row, start[row]:cur[row] + 1].tolist())
            if count is not None:
                stopped_at[row] = count
                hits[row] = True
        return self.place.rows(hits)

    def _rows(self, state, prompts, stopped_at, draw):
        """(tokens, log-probs, finish) of each real row, read back once."""
        tokens, logprobs, cur, start = map(self.place.host, (state.tokens, state.logprobs,
                                                             state.cur, state.start))
        stop_ids = set(draw.stop_ids.tolist())
        results = []
        for row in range(prompts):
            count = stopped_at.get(row, int(cur[row] - start[row]) + 1)
            columns = slice(int(start[row]), int(start[row]) + count)
            row_tokens = tokens[row, columns].tolist()
            stopped = row in stopped_at or bool(row_tokens and row_tokens[-1] in stop_ids)
            results.append((row_tokens, logprobs[row, columns].tolist(),
                            "stop" if stopped else "length"))
        return results


def _stops(tokens: torch.Tensor, stop_ids: torch.Tensor) -> torch.Tensor:
    """[rows] bool: the token is a stop id. A comparison, not `torch.isin`, which torch_xla
    runs by reading the values (a graph cut, and a compile, every step)."""
    return (tokens[:, None] == stop_ids[None, :]).any(-1)
