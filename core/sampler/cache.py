"""The KV cache a sampler keeps on the device, laid out by the model family.

A family describes what each attention call keeps per token (`LayerLayout`: its `Stream`s,
full keys and values for grouped-query attention, MLA's compressed latent) and whether the
layer sees only a sliding window (then a ring of `window` slots holds its last keys) or
attends to the prompt's encoding (an encoder-decoder's cross-attention). While
the sampler runs, every attention module whose class declares `kv_cache = None` holds this
cache, and each forward hands the layers their caches in call order (`next`): per-module
state could not tell the layers of a scanned stack apart (one template module serves them
all), the call order can."""

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
    """A layer's streams; `window` > 0: it attends to its last `window` positions only, so
    `window` slots suffice (a ring) when the cache is longer. `cross`: it attends to the
    encoded prompt, whose keys the prefill writes once and every decode step reads."""

    streams: tuple[Stream, ...]
    window: int = 0
    cross: bool = False


class CacheOrderError(RuntimeError):
    """A forward that skipped or repeated a layer's cache: the layout and the model disagree."""


@dataclasses.dataclass
class Cached:
    """What a decode step's attention reads: every stream whole, with the position each
    slot holds (-1: empty) and the position of each query."""

    streams: dict[str, torch.Tensor]
    key_positions: torch.Tensor  # [rows, slots]
    query_positions: torch.Tensor  # [rows, queries]


class LayerCache:
    def __init__(self, owner: GenerationCache, streams: dict[str, torch.Tensor], ring: int,
                 cross: bool):
        self.owner, self.streams, self.ring, self.cross = owner, streams, ring, cross

    def update(self, **columns: torch.Tensor) -> Cached | None:
        """Write this forward's columns ([rows, tokens, *per_token] per stream). Prefill
        writes the right-padded prompts (a ring: each slot's latest prompt column) and returns
        None: the model attends as in training. A decode step writes one column per row, at
        its position (a ring: position mod window), and returns the whole cache. A cross
        layer's columns are the encoded prompt's, written by the prefill only (`read`)."""
        if self.cross and self.owner.cursor is not None:
            raise CacheOrderError("a decode step wrote a cross-attention cache: the prefill "
                                  "writes the encoded prompt once, decode steps `read` it")
        if columns.keys() != self.streams.keys():
            raise CacheOrderError(f"a layer wrote streams {sorted(columns)}; its layout has "
                                  f"{sorted(self.streams)}")
        owner = self.owner
        for name, value in columns.items():
            stream = self.streams[name]
            value = value.to(stream.dtype)
            if owner.cursor is None and self.ring:
                index = owner.ring_columns[self.ring]
                index = index.view(*index.shape, *[1] * (value.dim() - 2))
                stream.copy_(value.gather(1, index.expand(-1, -1, *value.shape[2:])))
            elif owner.cursor is None:
                stream[:, :value.shape[1]] = value
            else:
                slot = owner.cursor % self.ring if self.ring else owner.cursor
                stream.index_put_((owner.row_index, slot), value[:, 0])
        if owner.cursor is None:
            return None
        positions = owner.ring_positions[self.ring] if self.ring else owner.key_positions
        return Cached(self.streams, positions, owner.cursor[:, None])

    def read(self) -> Cached | None:
        """A cross layer's decode step: the encoded prompt's streams, every prompt column at
        position 0 and padding at -1, so each query sees the whole prompt and nothing else.
        None at the prefill, which writes them (`update`)."""
        owner = self.owner
        if not self.cross:
            raise CacheOrderError("only a cross-attention layer reads its cache unwritten")
        if owner.cursor is None:
            return None
        return Cached(self.streams, owner.source_positions, owner.cursor[:, None])


class GenerationCache:
    """The caches of every layer for `rows` rows: a full layer's slot c holds the token at
    position c (prompts right-padded, so positions equal columns); a ring layer's slot s the
    latest position p with p mod window = s."""

    def __init__(self, layout: list[LayerLayout], rows: int, slots: int, dtype: torch.dtype,
                 placement):
        """`placement` (core/sampler/placement.py) makes each [rows, ...] tensor where the
        rows' activations live: zeros laid out as a stream's spec, host tensors split by row."""
        self.layers = []
        for layer in layout:
            ring = layer.window if 0 < layer.window < slots else 0
            self.layers.append(LayerCache(self, {
                stream.name: placement.zeros((rows, ring or slots, *stream.per_token), dtype,
                                             stream.spec)
                for stream in layer.streams}, ring, layer.cross))
        # each row's index among the rows this process holds (all of them on XLA's SPMD)
        held = placement.zeros((rows,), torch.long, ("batch",))
        self.row_index = held + torch.arange(held.shape[0], device=held.device)
        self.key_positions = placement.rows(torch.arange(slots).expand(rows, slots).contiguous())
        # the cross layers' keys: 0 at the encoded prompt's columns, -1 past it (`read`)
        self.source_positions = (placement.zeros((rows, slots), torch.long, ("batch", None))
                                 if any(layer.cross for layer in layout) else None)
        # per window: the position each slot holds, shared by the layers with that window,
        # and at prefill the prompt column each slot takes
        self.ring_positions = {layer.ring: placement.rows(torch.full((rows, layer.ring), -1))
                               for layer in self.layers if layer.ring}
        self.ring_columns: dict[int, torch.Tensor] = {}
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

    def prefill(self, lengths: torch.Tensor, source_lengths: torch.Tensor | None = None):
        """The forward of right-padded prompts of `lengths` [rows] tokens (an encoder-decoder:
        the decoder's start, and `source_lengths` the encoded prompts' tokens)."""
        if self.source_positions is not None:
            columns = torch.arange(self.source_positions.shape[1], device=lengths.device)
            self.source_positions.copy_(torch.where(columns < source_lengths[:, None], 0, -1))
        for ring, positions in self.ring_positions.items():
            slots = torch.arange(ring, device=lengths.device)
            back = lengths[:, None] - 1 - slots  # how far before the last prompt token
            latest = slots + torch.div(back, ring, rounding_mode="floor") * ring
            positions.copy_(torch.where(back >= 0, latest, -1))
            self.ring_columns[ring] = latest.clamp(min=0)
        return self._forward(None)

    def decode(self, cursor: torch.Tensor):
        """A decode step writing each row's new column at position `cursor` [rows]."""
        for ring, positions in self.ring_positions.items():
            positions.index_put_((self.row_index, cursor % ring), cursor)
        return self._forward(cursor)

    @contextlib.contextmanager
    def _forward(self, cursor: torch.Tensor | None):
        """One forward of the model, in which every layer takes its cache exactly once."""
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
