"""DPO's batches: preference pairs (zoo/data/dpo_data.py) packed whole into fixed-length
rows, each response a document of its own (zoo/data/packing.py), a pure function of the
batch index, with a `pairs` mask saying which pair slots of a row are filled."""

from __future__ import annotations

import numpy as np
import torch

from core.data import DataError, EpochOrder, host_rows
from core.inputs import host_batch_size
from zoo.data.dpo_data import PreferencePairs
from zoo.data.packing import PackedRows, pack, rows_of


class DPOBatches:
    """Deterministic, resumable fixed-shape batches of packed pairs: `batch(i)` is global
    batch i's rows for this host, a pure function of i (rows shuffled per epoch). Every
    batch has `pairs` ([rows, most pairs in a row] bool), one shape for the whole run."""

    def __init__(self, pairs: PreferencePairs, seq_len: int, global_batch_size: int,
                 process_index: int, process_count: int, pad_id: int, seed: int):
        if not pairs.pairs:
            raise DataError("the preference data has no pair that fits seq_len; raise seq_len "
                            "or set data.truncation=cut_prompt")
        self.pairs, self.seq_len, self.pad_id = pairs, seq_len, pad_id
        self.global_batch_size, self.process_index = global_batch_size, process_index
        self.local_batch_size = host_batch_size(global_batch_size, process_count)
        order = np.random.default_rng(seed).permutation(pairs.pairs)
        lengths = np.diff(pairs.starts)
        packed = pack(lengths[0::2][order] + lengths[1::2][order], seq_len)
        pair_rows = order[packed.members]  # each pair's two responses, one after the other
        self.rows = PackedRows(np.stack([2 * pair_rows, 2 * pair_rows + 1], 1).reshape(-1),
                               2 * packed.firsts, packed.tokens_in_examples)
        self.pairs_in_row = np.diff(packed.firsts)
        self.most_pairs = int(self.pairs_in_row.max())
        self._order = EpochOrder(self.rows.count, seed)

    def describe(self) -> str:
        return (f"{self.rows.count:,} rows of {self.seq_len} (up to {self.most_pairs} pairs "
                f"a row, {self.rows.efficiency(self.seq_len):.1%} of row tokens are "
                f"responses and their prompts)")

    def batch(self, index: int) -> dict:
        if index < 0:
            raise ValueError(f"batch index must be >= 0, got {index}")
        within = host_rows(self.process_index, self.local_batch_size)
        picked = self._order.items(index * self.global_batch_size + within)
        pairs = self.pairs
        batch = rows_of(pairs.tokens, pairs.trained, pairs.starts, self.rows, picked,
                        self.seq_len, self.pad_id)
        counts = np.where(picked >= 0, self.pairs_in_row[np.maximum(picked, 0)], 0)
        present = np.arange(self.most_pairs) < counts[:, None]
        return batch | {"pairs": torch.from_numpy(present)}
