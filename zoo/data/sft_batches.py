"""Supervised fine-tuning's batches: instruction examples (zoo/data/sft_data.py) packed into
fixed-length rows that keep them apart (zoo/data/packing.py), a pure function of the batch
index, with rows held out for validation."""

from __future__ import annotations

import numpy as np

from core.data import DataError, EpochOrder, host_rows
from core.inputs import host_batch_size
from zoo.data.packing import PackedRows, pack, rows_of
from zoo.data.sft_data import SFTDataConfig, SFTExamples


class SFTBatches:
    """Deterministic, resumable fixed-shape batches of packed examples: `batch(i)` is global
    batch i's rows for this host, a pure function of i (rows shuffled per epoch), like
    pretraining's TokenBatches; `held_out` rows at the end are validation's only."""

    def __init__(self, examples: SFTExamples, config: SFTDataConfig, seq_len: int,
                 global_batch_size: int, process_index: int, process_count: int, pad_id: int,
                 held_out: int = 0):
        self.examples, self.seq_len, self.pad_id = examples, seq_len, pad_id
        self.packing, self.global_batch_size = config.packing, global_batch_size
        self.local_batch_size = host_batch_size(global_batch_size, process_count)
        self.process_index, self.held_out, self.start = process_index, held_out, 0
        # examples in a seeded order before packing, so a sorted source mixes in its rows
        order = np.random.default_rng(config.shuffle_seed).permutation(len(examples.starts) - 1)
        packed = pack(np.diff(examples.starts)[order], seq_len, config.packing)
        self.rows = PackedRows(order[packed.members], packed.firsts, packed.tokens_in_examples)
        if held_out and held_out >= self.rows.count:
            raise DataError(f"the data packs into {self.rows.count} rows of {seq_len} tokens, "
                            f"too few to hold out {held_out} for validation; lower eval_rows")
        self._count = self.rows.count - held_out
        self._order = EpochOrder(self._count, config.shuffle_seed)

    def describe(self) -> str:
        how = "packed" if self.packing else "one example per row"
        return (f"{self.rows.count:,} rows of {self.seq_len} ({how}, "
                f"{self.rows.efficiency(self.seq_len):.1%} of row tokens are examples)")

    def batch(self, index: int) -> dict:
        if index < 0:
            raise ValueError(f"batch index must be >= 0, got {index}")
        within = host_rows(self.process_index, self.local_batch_size)
        return self._rows(self._order.items(index * self.global_batch_size + within))

    def validation_batches(self):
        """This host's share of the held-out rows, a global batch at a time."""
        within = host_rows(self.process_index, self.local_batch_size)
        for first in range(0, self.held_out, self.global_batch_size):
            position = first + within
            yield self._rows(np.where(position < self.held_out, self._count + position, -1))

    def _rows(self, picked: np.ndarray) -> dict:
        examples = self.examples
        return rows_of(examples.tokens, examples.trained, examples.starts, self.rows, picked,
                       self.seq_len, self.pad_id, segments=self.packing)

    def __iter__(self):
        index = self.start
        while True:
            yield self.batch(index)
            index += 1
