"""Choosing the next token on the device, in plain torch ops that trace to one graph.

Order as transformers' warpers: temperature, then top-k, then top-p. The cuts are
comparisons with a threshold (no scatter), and the randomness is a hash of (seed, sample id,
token index, vocabulary index), not a global RNG: a row's draw depends neither on its place
in the batch nor on the number of devices (torch_xla reseeds at every sync, and each dtensor
process has its own generator)."""

from __future__ import annotations

import torch

_MASK = 0xFFFFFFFF


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """`logits` [rows, vocab] with -inf outside the kept set: the `top_k` largest (ties at
    the k-th kept), then the smallest set whose probability reaches `top_p` (the first always
    kept; ties at the cut kept). 0 and 1 cut nothing."""
    if top_k > 0:
        threshold = torch.topk(logits, min(top_k, logits.shape[-1])).values[..., -1:]
        logits = torch.where(logits >= threshold, logits, torch.full_like(logits, -torch.inf))
    if top_p < 1:
        ordered = torch.sort(logits, dim=-1, descending=True).values
        probs = torch.softmax(ordered.float(), dim=-1)
        kept = (torch.cumsum(probs, dim=-1) - probs) < top_p
        cut = ordered.gather(-1, kept.sum(-1, keepdim=True) - 1)
        logits = torch.where(logits >= cut, logits, torch.full_like(logits, -torch.inf))
    return logits


def _int32(value: int) -> int:
    """A 32-bit pattern as the int32 torch holds it."""
    value &= _MASK
    return value - (1 << 32) if value >= 1 << 31 else value


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int32 words (torch's `>>` is arithmetic)."""
    return (x >> bits) & ((1 << (32 - bits)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (Chris Wellons' integer hash): int32 words in, well-mixed int32 words out
    (the multiplications wrap, as 32-bit hardware's do)."""
    x = x ^ _shift_right(x, 16)
    x = x * _int32(0x7FEB352D)
    x = x ^ _shift_right(x, 15)
    x = x * _int32(0x846CA68B)
    return x ^ _shift_right(x, 16)


def uniform(seed: torch.Tensor, sample_ids: torch.Tensor, index: torch.Tensor,
            vocab: int) -> torch.Tensor:
    """[rows, vocab] floats in (0, 1), a function of (seed, each row's sample id, its new-token
    index, the vocabulary index) only. 24 bits: exact in fp32."""
    row = _mix(_mix(_mix(seed.to(torch.int32) + _int32(0x9E3779B9))
                    ^ sample_ids.to(torch.int32)) ^ index.to(torch.int32))
    columns = torch.arange(vocab, dtype=torch.int32, device=row.device)
    bits = _mix(row[:, None] ^ _mix(columns + _int32(0x632BE5AB)))
    return (_shift_right(bits, 8).float() + 0.5) / (1 << 24)


def gumbel(seed, sample_ids, index, vocab: int) -> torch.Tensor:
    """Gumbel(0, 1) noise: argmax(logits + noise) draws from softmax(logits) exactly."""
    return -torch.log(-torch.log(uniform(seed, sample_ids, index, vocab)))


def choose(logits: torch.Tensor, *, greedy: bool, temperature: torch.Tensor, top_k: int,
           top_p: float, seed: torch.Tensor, sample_ids: torch.Tensor,
           index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [rows] int32, their log-probs [rows] fp32). Greedy is argmax (the first on
    ties, as torch and transformers). The log-prob is log_softmax(logits / T) over the full,
    unfiltered vocabulary (T = 1 when greedy): the trainer's definition, so the two compare
    like with like. `temperature`, `seed` are 0-d tensors: a new value reuses the graph."""
    logits = logits.float()
    if greedy:
        tokens = logits.argmax(-1)
    else:
        scaled = logits / temperature
        noisy = filter_logits(scaled, top_k, top_p) + gumbel(seed, sample_ids, index,
                                                             logits.shape[-1])
        tokens = noisy.argmax(-1)
        logits = scaled
    logprobs = torch.log_softmax(logits, -1).gather(-1, tokens[:, None])[:, 0]
    return tokens.to(torch.int32), logprobs
