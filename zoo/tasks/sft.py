"""Supervised fine-tuning (`task=sft`) of any causal-LM family: instruction rows (prompt /
completion, or chat messages rendered by the tokenizer's template: zoo/tasks/sft_data.py)
become examples whose loss covers the completion or assistant turns only, packed into
fixed-length rows that keep them apart (zoo/tasks/packing.py). The loss, its weight (the
trained tokens, so micro-batches, hosts and processes average exactly as one batch would),
validation and export are those of the family's own causal-LM task, which this wraps: a
mixture of experts keeps its router loss.

    zoo train llama-tiny task=sft --init-from runs/llama-tiny data.source=chats.jsonl
"""

from __future__ import annotations

import dataclasses
import inspect
import sys

import numpy as np

from core.data import DataError, EpochOrder, check_vocab, host_rows, load_tokenizer
from core.inputs import host_batch_size
from core.task import Task
from zoo.tasks.causal_lm import LMTrainConfig, with_token_ids
from zoo.tasks.packing import PackedRows, pack, rows_of
from zoo.tasks.sft_data import SFTDataConfig, SFTExamples, load_examples


@dataclasses.dataclass
class SFTTrainConfig(LMTrainConfig):
    data: SFTDataConfig = dataclasses.field(default_factory=SFTDataConfig)


def read_once(load):
    """`load(data, tokenizer, seq_len)` as `read(data, seq_len)`: a source read once per
    process (resolve checks it, data packs it), the last four kept."""
    memo: dict[str, object] = {}

    def read(data, seq_len: int):
        key = repr((dataclasses.asdict(data), seq_len))
        if key not in memo:
            if len(memo) >= 4:
                memo.pop(next(iter(memo)))
            memo[key] = load(data, load_tokenizer(data.tokenizer), seq_len)
        return memo[key]

    return read


_examples = read_once(load_examples)


class SupervisedFineTuning(Task):
    name = "sft"
    config_cls = SFTTrainConfig
    unit = "tokens"
    eval_backend = "causal"
    generates_text = True
    sample_prompt = 'Repeat the word "zoo".'
    chat = True

    def __init__(self, base: Task, model_cls: type):
        self.base = base  # the family's causal-LM task: its loss, validation and export
        self.model_cls = model_cls

    def resolve(self, config: SFTTrainConfig) -> SFTTrainConfig:
        self.check_model(config.data)
        examples = _examples(config.data, config.seq_len)
        print(f"sft data: {describe(examples, config.data.truncation)}", file=sys.stderr)
        tokenizer = load_tokenizer(config.data.tokenizer)
        return with_token_ids(config, tokenizer, ("bos_token_id", "eos_token_id", "pad_token_id"))

    def check_model(self, data: SFTDataConfig) -> None:
        """Packed rows need a model that keeps documents apart: one whose forward takes
        `segment_ids` and `positions` (llama's and mixtral's do)."""
        taken = inspect.signature(self.model_cls.forward).parameters
        if data.packing and not {"segment_ids", "positions"} <= taken.keys():
            raise DataError(f"{self.model_cls.__name__}.forward takes no segment_ids and "
                            "positions, which packed rows need to keep examples apart; set "
                            "data.packing=false (one example per row)")

    def data(self, config: SFTTrainConfig, process_index: int, process_count: int) -> SFTBatches:
        tokenizer = load_tokenizer(config.data.tokenizer)
        check_vocab(tokenizer, config.model.vocab_size, config.init_from)
        examples = _examples(config.data, config.seq_len)
        pad = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
        batches = SFTBatches(examples, config.data, config.seq_len, config.global_batch_size,
                             process_index, process_count, pad,
                             held_out=config.eval_rows if config.eval_every else 0)
        if process_index == 0:
            print(f"sft rows: {batches.describe()}", file=sys.stderr)
        return batches

    def loss(self, model, batch):
        return self.base.loss(model, batch)

    def loss_weight(self, batch):
        return self.base.loss_weight(batch)

    def items_per_step(self, config: SFTTrainConfig) -> int:
        return self.base.items_per_step(config)

    def example_batch(self, config: SFTTrainConfig, seed: int = 0) -> dict:
        return self.base.example_batch(config, seed)

    def after_step(self, engine, step: int) -> dict | None:
        return self.base.after_step(engine, step)

    def write_hf_extras(self, config, hf_config, folder) -> None:
        self.base.write_hf_extras(config, hf_config, folder)


def describe(examples: SFTExamples, truncation: str) -> str:
    """One line: where the examples came from, what the loss trains, what was cut."""
    trained = int(examples.trained.sum())
    return (f"{examples.label}, {len(examples.starts) - 1:,} examples, "
            f"{len(examples.tokens):,} tokens, {trained:,} trained "
            f"({examples.train_on}){what_was_cut(examples, truncation)})")


def what_was_cut(found, truncation: str) -> str:
    """"; N longer than seq_len dropped, ... (data.truncation=...)", or "" when nothing
    was: `found` counts them (`dropped`, `truncated`)."""
    cut = []
    if found.dropped:
        cut.append(f"{found.dropped:,} longer than seq_len dropped")
    if found.truncated:
        cut.append(f"{found.truncated:,} with the prompt's head cut")
    return f"; {', '.join(cut)} (data.truncation={truncation})" if cut else ""


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
