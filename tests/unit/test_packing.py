"""Packed rows (zoo/data/packing.py): examples whole and in order within rows, segment ids
and per-example positions, the first label of each example masked, padding out of the loss;
the pretraining packer's `data.document_mask` rows cut documents into segments the same way.
That the models keep segments apart: tests/multidevice/test_packing.py."""

import numpy as np
import pytest
import torch

from core.data import load_tokenizer
from zoo.data.packed_text import DataConfig, TokenBatches
from zoo.data.packing import OPEN_ROWS, example_documents, pack, rows_of


def test_every_example_lands_whole_in_one_row_and_rows_are_fuller_than_one_each():
    lengths = np.random.default_rng(0).integers(1, 60, 500)
    packed = pack(lengths, 64)
    assert sorted(packed.members.tolist()) == list(range(500))
    per_row = [lengths[packed.members[a:b]].sum()
               for a, b in zip(packed.firsts[:-1], packed.firsts[1:])]
    assert max(per_row) <= 64
    assert packed.efficiency(64) > 0.9  # one example per row would be about 0.47
    assert pack(lengths, 64, packed=False).count == 500


def test_first_fit_looks_back_only_over_the_open_rows():
    """A long example closes no row, later short ones still fill the open ones: linear time
    with a bounded window (the oldest open row is closed beyond OPEN_ROWS)."""
    lengths = np.array([60] * (OPEN_ROWS + 1) + [4])
    packed = pack(lengths, 64)
    row_of_last = np.searchsorted(packed.firsts, np.where(packed.members == OPEN_ROWS + 1)[0],
                                  side="right")[0] - 1
    assert row_of_last == 1  # row 0 was closed when the window moved past it


def test_rows_carry_segments_positions_and_mask_each_first_label():
    tokens = np.arange(100, 112)
    starts = np.array([0, 3, 8, 12])  # examples of 3, 5 and 4 tokens
    trained = np.array([0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1], dtype=bool)
    packed = pack(np.diff(starts), 8)
    batch = rows_of(tokens, trained, starts, packed, np.array([0, 1, -1]), 8, pad_id=0)
    assert batch["input_ids"][0].tolist() == [100, 101, 102, 103, 104, 105, 106, 107]
    assert batch["segment_ids"][0].tolist() == [1, 1, 1, 2, 2, 2, 2, 2]
    assert batch["positions"][0].tolist() == [0, 1, 2, 0, 1, 2, 3, 4]
    assert batch["labels"][0].tolist() == [-100, 101, 102, -100, -100, 105, 106, 107]
    assert batch["segment_ids"][1].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]  # padding: 0
    assert batch["labels"][1].tolist() == [-100, 109, 110, 111, -100, -100, -100, -100]
    assert (batch["labels"][2] == -100).all() and (batch["input_ids"][2] == 0).all()


def test_example_documents_are_what_packed_rows_carry():
    found = example_documents((2, 9), documents=3)
    assert found["segment_ids"][1].tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert found["positions"][0].tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("default")


def test_document_mask_cuts_pretraining_rows_at_every_eos(tokenizer, tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_text('{"text": "one two three"}\n{"text": "four five"}\n{"text": "six"}\n')
    config = DataConfig(source=str(source), cache_dir=str(tmp_path / "cache"),
                        document_mask=True)
    batches = TokenBatches(config, tokenizer, seq_len=64, global_batch_size=1)
    batch = batches.batch(0)
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    eos = tokenizer.eos_token_id
    after_eos = torch.cat((torch.tensor([False]), ids[:-1] == eos))
    padding = ids == tokenizer.pad_token_id
    starts = (after_eos | (torch.arange(64) == 0)) & ~padding
    assert padding.any() and starts.sum() == 3  # three documents, then padding
    assert (batch["segment_ids"][0] == torch.where(padding, 0, starts.cumsum(0))).all()
    assert (batch["positions"][0][starts] == 0).all()
    assert (labels[after_eos] == -100).all()  # no EOS learns the next document's BOS
    plain = TokenBatches(DataConfig(source=str(source), cache_dir=str(tmp_path / "cache")),
                         tokenizer, seq_len=64, global_batch_size=1).batch(0)
    assert set(plain) == {"input_ids", "labels"} and (plain["input_ids"][0] == ids).all()
