"""The sampler: batches of prompts generated on the model's device with a static-shape cache.

Prompts are right-padded to a bucket, so a row's positions equal its cache columns; the
prefill is the training forward (one graph per bucket), then each decode step feeds every
row's last token at its own position. All state a step reads or writes is a device tensor
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
from core.sampler.sampling import choose
from core.sampler.stops import StopMatcher


@dataclasses.dataclass
class Timings:
    prefill_s: float = 0.0
    decode_s: float = 0.0
    new_tokens: int = 0

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
    """Generates with `model` (a decoder with `hidden_states(ids, segment_ids, positions)`
    and `logits(hidden)`) whose attention writes the cache `layout` describes; eagerly on the
    model's device."""

    def __init__(self, model: nn.Module, layout: list[LayerLayout], *, shape: SamplerShape):
        self.model, self.layout, self.shape = model, layout, shape
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype

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
        a prefill at their bucket and decode steps until every row is done."""
        rows, slots = self.shape.rows, self.shape.slots
        bucket = self.shape.bucket(max(map(len, prompts)))
        ids = torch.full((rows, bucket), pad_id, dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, :len(prompt)] = torch.tensor(prompt)
        lengths = torch.tensor([len(p) for p in prompts] + [1] * (rows - len(prompts)))
        padding = torch.arange(rows) >= len(prompts)
        device = self.device
        draw = _Draw(params.greedy, params.top_k, params.top_p,
                     torch.tensor(params.temperature or 1.0, device=device),
                     torch.tensor(params.seed, dtype=torch.int32, device=device),
                     torch.tensor(sample_ids + [0] * (rows - len(prompts)), dtype=torch.int32,
                                  device=device),
                     torch.tensor(params.stop_token_ids, dtype=torch.int32, device=device))
        cache = GenerationCache(self.layout, rows, slots, self.dtype, self.device)
        started = time.perf_counter()
        with cache.bind(self.model):
            state = self._prefill(cache, ids.to(self.device), lengths.to(self.device),
                                  padding.to(self.device), params.max_new_tokens, draw)
            all_done = bool(state.done.all())
            timings.prefill_s += time.perf_counter() - started
            started = time.perf_counter()
            matcher = StopMatcher(params.stop_strings, decode) if params.stop_strings else None
            stopped_at: dict[int, int] = {}
            no_hits = torch.zeros(rows, dtype=torch.bool, device=self.device)
            hits = no_hits
            steps = 0
            while not all_done:
                for _ in range(max(1, min(params.check_every,
                                          params.max_new_tokens - 1 - steps))):
                    state = self._decode(cache, state, hits, draw)
                    hits, steps = no_hits, steps + 1
                all_done = bool(state.done.all())
                if matcher is not None:  # a row it ends is done by the next step
                    hits = self._stop_strings(matcher, state, len(prompts), stopped_at)
            timings.decode_s += time.perf_counter() - started
        return self._rows(state, len(prompts), stopped_at, draw)

    def _prefill(self, cache, ids, lengths, padding, max_new_tokens, draw) -> DecodeState:
        """The prompts' forward (writing their keys and values) and each row's first token,
        sampled from the hidden state of its last prompt token."""
        with cache.prefill(lengths):
            hidden = self.model.hidden_states(ids)
        index = (lengths - 1)[:, None, None].expand(-1, 1, hidden.shape[-1])
        logits = self.model.logits(hidden.gather(1, index)[:, 0])
        token, logprob = choose(logits, greedy=draw.greedy, temperature=draw.temperature,
                                top_k=draw.top_k, top_p=draw.top_p, seed=draw.seed,
                                sample_ids=draw.sample_ids, index=torch.zeros_like(lengths))
        rows, slots = ids.shape[0], self.shape.slots
        tokens = torch.zeros(rows, slots, dtype=torch.int32, device=ids.device)
        logprobs = torch.zeros(rows, slots, dtype=torch.float32, device=ids.device)
        row_index = torch.arange(rows, device=ids.device)
        tokens.index_put_((row_index, lengths), token)
        logprobs.index_put_((row_index, lengths), logprob)
        limit = lengths + max_new_tokens
        done = padding | torch.isin(token, draw.stop_ids) | (lengths + 1 >= limit)
        return DecodeState(lengths, token, lengths, limit, done, tokens, logprobs)

    def _decode(self, cache, state: DecodeState, hits, draw) -> DecodeState:
        """One token for every row: the last token at its position in, the next one out. A
        row done before the step keeps its tokens and its place."""
        with cache.decode(state.cur):
            hidden = self.model.hidden_states(state.last[:, None].long(), None,
                                              state.cur[:, None])
        token, logprob = choose(self.model.logits(hidden[:, 0]), greedy=draw.greedy,
                                temperature=draw.temperature, top_k=draw.top_k,
                                top_p=draw.top_p, seed=draw.seed, sample_ids=draw.sample_ids,
                                index=state.cur + 1 - state.start)
        was_done = state.done | hits
        column = torch.clamp(state.cur + 1, max=self.shape.slots - 1)
        row_index = torch.arange(state.cur.shape[0], device=state.cur.device)
        old_token = state.tokens.gather(1, column[:, None])[:, 0]
        old_logprob = state.logprobs.gather(1, column[:, None])[:, 0]
        state.tokens.index_put_((row_index, column), torch.where(was_done, old_token, token))
        state.logprobs.index_put_((row_index, column),
                                  torch.where(was_done, old_logprob, logprob))
        done = was_done | torch.isin(token, draw.stop_ids) | (state.cur + 2 >= state.limit)
        return dataclasses.replace(state, cur=state.cur + (~was_done).long(),
                                   last=torch.where(was_done, state.last, token), done=done)

    def _stop_strings(self, matcher, state, prompts, stopped_at) -> torch.Tensor:
        """[rows] bool on the device: the rows a stop string ended since the last check
        (their token counts recorded in `stopped_at`)."""
        tokens, cur, start = (t.cpu() for t in (state.tokens, state.cur, state.start))
        hits = torch.zeros(cur.shape[0], dtype=torch.bool)
        for row in range(prompts):
            if row in stopped_at:
                continue
            count = matcher.match(row, tokens[row, start[row]:cur[row] + 1].tolist())
            if count is not None:
                stopped_at[row] = count
                hits[row] = True
        return hits.to(state.done.device)

    def _rows(self, state, prompts, stopped_at, draw):
        """(tokens, log-probs, finish) of each real row, read back once."""
        tokens, logprobs, cur, start = (t.cpu() for t in (state.tokens, state.logprobs,
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
