"""Examples packed into fixed-length rows that keep them apart.

A row holds whole examples one after another, then padding. With each batch come the
examples' `segment_ids` (1, 2, ... per example in the row; 0 for padding), which the
model's attention uses to keep each example to itself, and `positions`, each example's
own positions from 0, so its rotary angles are those it has alone. The label of an
example's first token is masked: nothing before it in its row belongs to it, so nothing
may learn to predict it. Unpacked (`packed=False`), a row is one example and padding, with
no segment ids: causal attention already keeps padding at the end out of the example.

Packing is first fit over a window of the most recent open rows (so it stays linear in the
examples), in the examples' order; rows are then shuffled per epoch like pretraining rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from core.data import IGNORE_INDEX

OPEN_ROWS = 64  # rows still taking examples: a wider window packs a little tighter, slower


@dataclasses.dataclass(frozen=True)
class PackedRows:
    """Which examples each row holds: row r is examples `members[firsts[r]:firsts[r+1]]`."""

    members: np.ndarray  # int64 [examples kept], example indices in row order
    firsts: np.ndarray  # int64 [rows + 1]
    tokens_in_examples: int

    @property
    def count(self) -> int:
        return len(self.firsts) - 1

    def efficiency(self, seq_len: int) -> float:
        """Tokens of examples over tokens of rows: what packing did not spend on padding."""
        return self.tokens_in_examples / max(self.count * seq_len, 1)


def pack(lengths: np.ndarray, seq_len: int, packed: bool = True) -> PackedRows:
    """Rows of at most `seq_len` tokens for examples of `lengths` (each at most seq_len)."""
    if not packed:
        order = np.arange(len(lengths))
        return PackedRows(order, np.arange(len(lengths) + 1), int(lengths.sum()))
    rows: list[list[int]] = []
    room: list[int] = []  # free tokens of the open rows, rows[first_open:]
    first_open = 0
    for example, length in enumerate(lengths.tolist()):
        fits = next((i for i, free in enumerate(room) if free >= length), None)
        if fits is None:
            rows.append([])
            room.append(seq_len)
            fits = len(room) - 1
            if len(room) > OPEN_ROWS:  # the oldest open row is closed as it is
                room.pop(0)
                first_open += 1
                fits -= 1
        rows[first_open + fits].append(example)
        room[fits] -= length
    members = np.fromiter((e for row in rows for e in row), dtype=np.int64)
    firsts = np.concatenate(([0], np.cumsum([len(row) for row in rows]))).astype(np.int64)
    return PackedRows(members, firsts, int(lengths.sum()))


def rows_of(tokens: np.ndarray, trained: np.ndarray, starts: np.ndarray, packed: PackedRows,
            picked: np.ndarray, seq_len: int, pad_id: int, segments: bool = True) -> dict:
    """Rows `picked` (-1: a row of padding) as a batch: input ids and labels, plus
    segment ids and positions when `segments`. Example e is tokens[starts[e]:starts[e+1]],
    `trained` marks the tokens its loss learns."""
    shape = (len(picked), seq_len)
    ids = np.full(shape, pad_id, dtype=np.int64)
    labels = np.full(shape, IGNORE_INDEX, dtype=np.int64)
    segment_ids = np.zeros(shape, dtype=np.int64)
    positions = np.zeros(shape, dtype=np.int64)
    for r, row in enumerate(picked.tolist()):
        if row < 0:
            continue
        at = 0
        members = packed.members[packed.firsts[row]:packed.firsts[row + 1]]
        for segment, example in enumerate(members):
            span = slice(starts[example], starts[example + 1])
            length = span.stop - span.start
            ids[r, at:at + length] = tokens[span]
            labels[r, at:at + length] = np.where(trained[span], tokens[span], IGNORE_INDEX)
            labels[r, at] = IGNORE_INDEX  # predicted by nothing of its own
            segment_ids[r, at:at + length] = segment + 1
            positions[r, at:at + length] = np.arange(length)
            at += length
    batch = {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels)}
    if segments:
        batch |= {"segment_ids": torch.from_numpy(segment_ids),
                  "positions": torch.from_numpy(positions)}
    return batch


def stream_segments(row_tokens: np.ndarray, starts_document: np.ndarray,
                    padding: np.ndarray | None = None) -> dict:
    """Segment ids and positions for rows cut from a stream of documents (pretraining),
    given where documents start (`starts_document`, bool [rows, seq]; a row's first token
    always starts a segment): each piece of a document in a row is a segment; `padding`
    (bool [rows, seq]) is segment 0, as in packed examples' rows."""
    starts = starts_document.copy()
    starts[:, 0] = True
    segment_ids = np.cumsum(starts, axis=1)
    if padding is not None:
        segment_ids = np.where(padding, 0, segment_ids)
    index = np.broadcast_to(np.arange(row_tokens.shape[1]), row_tokens.shape)
    segment_start = np.maximum.accumulate(np.where(starts, index, 0), axis=1)
    return {"segment_ids": torch.from_numpy(segment_ids.astype(np.int64)),
            "positions": torch.from_numpy((index - segment_start).astype(np.int64))}


def example_documents(shape: tuple[int, int], documents: int = 3) -> dict:
    """Segment ids and positions of rows holding `documents` equal documents each, for the
    example batches that plans and compile checks trace."""
    rows, seq_len = shape
    segment_ids = torch.arange(seq_len) * documents // seq_len + 1
    positions = torch.arange(seq_len) - torch.searchsorted(segment_ids, segment_ids)
    return {"segment_ids": segment_ids.expand(rows, -1).clone(),
            "positions": positions.expand(rows, -1).clone()}
