"""The KV cache a sampler keeps on the device, laid out by the model family.

A family describes what each attention call keeps per token (`LayerLayout`: its `Stream`s,
full keys and values for grouped-query attention). While the sampler runs, every attention
module whose class declares `kv_cache = None` holds this cache, and each forward hands
the layers their caches in call order (`next`): per-module state could not tell the layers
of a scanned stack apart (one template module serves them all), the call order can."""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class Stream:
    """One cached tensor of a layer, stored [rows, slots, *per_token]; `spec` its logical
    sharding (e.g. ("batch", None, "tensor", None)) for a backend that places it."""

    name: str
    per_token: tuple[int, ...]
    spec: tuple


@dataclasses.dataclass(frozen=True)
class LayerLayout:
    streams: tuple[Stream, ...]


class CacheOrderError(RuntimeError):
    """A forward that skipped or repeated a layer's cache: the layout and the model disagree."""


@dataclasses.dataclass
class Cached:
    """What a decode step's attention reads: every stream whole, with the position each
    column holds (-1: empty) and the position of each query."""

    streams: dict[str, torch.Tensor]
    key_positions: torch.Tensor  # [rows, slots]
    query_positions: torch.Tensor  # [rows, queries]


class LayerCache:
    def __init__(self, owner: GenerationCache, streams: dict[str, torch.Tensor]):
        self.owner, self.streams = owner, streams

    def update(self, **columns: torch.Tensor) -> Cached | None:
        """Write this forward's columns ([rows, tokens, *per_token] per stream). Prefill
        writes columns 0.. of the right-padded prompts and returns None: the model attends
        as in training. A decode step writes one column per row, at its position, and returns
        the whole cache to attend over."""
        if columns.keys() != self.streams.keys():
            raise CacheOrderError(f"a layer wrote streams {sorted(columns)}; its layout has "
                                  f"{sorted(self.streams)}")
        owner = self.owner
        if owner.cursor is None:
            for name, value in columns.items():
                self.streams[name][:, :value.shape[1]] = value.to(self.streams[name].dtype)
            return None
        for name, value in columns.items():
            stream = self.streams[name]
            stream.index_put_((owner.row_index, owner.cursor), value[:, 0].to(stream.dtype))
        return Cached(self.streams, owner.key_positions, owner.cursor[:, None])


class GenerationCache:
    """The caches of every layer for `rows` rows of `slots` columns: column c holds the
    token at position c (prompts right-padded, so positions equal columns)."""

    def __init__(self, layout: list[LayerLayout], rows: int, slots: int, dtype: torch.dtype,
                 device: torch.device):
        self.layers = [LayerCache(self, {
            stream.name: torch.zeros(rows, slots, *stream.per_token, dtype=dtype, device=device)
            for stream in layer.streams}) for layer in layout]
        self.row_index = torch.arange(rows, device=device)
        self.key_positions = torch.arange(slots, device=device).expand(rows, slots)
        self.cursor: torch.Tensor | None = None
        self.handed_out = 0

    @contextlib.contextmanager
    def bind(self, model: nn.Module):
        """Hand this cache to every module of `model` that declares `kv_cache` (attention)."""
        hooked = [module for module in model.modules() if hasattr(type(module), "kv_cache")]
        for module in hooked:
            module.kv_cache = self
        try:
            yield self
        finally:
            for module in hooked:
                del module.kv_cache

    @contextlib.contextmanager
    def forward_pass(self, cursor: torch.Tensor | None = None):
        """One forward of the model: a prefill (`cursor` None) or a decode step writing each
        row's new column at `cursor` [rows]. Every layer must take its cache exactly once."""
        self.cursor, self.handed_out = cursor, 0
        yield
        if self.handed_out != len(self.layers):
            raise CacheOrderError(f"a forward used {self.handed_out} layer caches of "
                                  f"{len(self.layers)}: the cache layout does not match "
                                  "the model's attention calls")

    def next(self) -> LayerCache:
        if self.handed_out >= len(self.layers):
            raise CacheOrderError(f"a forward asked for more than the {len(self.layers)} "
                                  "layer caches of its layout (a layer ran twice)")
        self.handed_out += 1
        return self.layers[self.handed_out - 1]
