"""Text pairs for sequence-to-sequence training: (input, target) rows -> padded token ids ->
each host's teacher-forcing batches.

Every pair is tokenized once: the input truncated to `source_len` - 1 tokens plus EOS, the
target likewise to `target_len`; both padded to fixed shapes. Labels are the target with
padding set to -100 (out of the loss); the decoder reads them shifted right behind the start
token (pad, as in T5). Global batch `i` is a pure function of `i` (seeded epoch order) and
each host tokenizes all pairs but stacks only its rows, so resuming is exact.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import torch

from core.data import IGNORE_INDEX, EpochOrder, check_seed, host_rows, load_table
from core.errors import UserError
from core.inputs import host_batch_size

WORDS = (
    "apple river stone cloud tiger green music paper silver garden window candle horse "
    "winter orange forest bridge yellow planet castle honey rabbit ocean pencil mirror "
    "thunder violet basket dragon summer"
).split()


@dataclasses.dataclass
class Seq2SeqDataConfig:
    # "default": the embedded task (reverse a list of words); "synthetic": random tokens;
    # a local .jsonl/.json/.parquet file, folder or glob; otherwise a Hub dataset name.
    source: str = "default"
    input_column: str = "input"
    target_column: str = "target"
    split: str = "train"
    subset: str | None = None
    tokenizer: str = "default"  # "default" = core/assets/tokenizer, a local dir or a Hub name
    shuffle_seed: int = 0

    def __post_init__(self):
        check_seed(self.shuffle_seed)


def default_pairs(count: int = 4000, seed: int = 0) -> list[tuple[str, str]]:
    """The embedded task: "reverse: w1 w2 ... wn" -> "wn ... w2 w1" over 30 common words,
    3-6 words each, seeded. Learnable only by reading the input, so a falling loss shows the
    encoder-decoder works."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        words = rng.choices(WORDS, k=rng.randint(3, 6))
        pairs.append((f"reverse: {' '.join(words)}", " ".join(reversed(words))))
    return pairs


def load_pairs(config: Seq2SeqDataConfig) -> list[tuple[str, str]]:
    if config.source == "default":
        return default_pairs(seed=config.shuffle_seed)
    table = load_table(config.source, config.split, config.subset)
    columns = (config.input_column, config.target_column)
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise UserError(
            f"data.source {config.source} has no column '{missing[0]}' (data.input_column / "
            f"data.target_column); columns: {', '.join(table.column_names)}"
        )
    pairs = list(zip(table[config.input_column], table[config.target_column]))
    if not pairs:
        raise UserError(f"data.source {config.source} has no (input, target) pairs")
    return pairs


def encode(texts: list[str], tokenizer, length: int) -> np.ndarray:
    """Token ids [N, length]: each text truncated to length - 1, then EOS, then pad."""
    rows = np.full((len(texts), length), tokenizer.pad_token_id, dtype=np.int64)
    for i, ids in enumerate(tokenizer(list(texts), add_special_tokens=False)["input_ids"]):
        ids = [*ids[: length - 1], tokenizer.eos_token_id]
        rows[i, : len(ids)] = ids
    return rows


def shift_right(labels: torch.Tensor, start_id: int) -> torch.Tensor:
    """Decoder inputs for teacher forcing: the start token, then the labels but the last."""
    shifted = torch.cat([torch.full_like(labels[:, :1], start_id), labels[:, :-1]], dim=1)
    return torch.where(shifted == IGNORE_INDEX, start_id, shifted)


class PairBatches:
    """This host's rows of global batch `i` (or random tokens when synthetic) for a run
    config with `data` (a Seq2SeqDataConfig), `source_len`, `target_len` and the batch size."""

    def __init__(self, config, tokenizer, vocab_size: int,
                 process_index: int, process_count: int):
        self.config = config
        self.rows = host_rows(process_index, host_batch_size(config.global_batch_size,
                                                             process_count))
        self.pad = 0 if tokenizer is None else tokenizer.pad_token_id
        self.vocab_size = vocab_size
        if tokenizer is None:
            self.inputs = None
            return
        pairs = load_pairs(config.data)
        self.inputs = encode([p[0] for p in pairs], tokenizer, config.source_len)
        self.targets = encode([p[1] for p in pairs], tokenizer, config.target_len)
        self.order = EpochOrder(len(pairs), config.data.shuffle_seed)

    def batch(self, index: int) -> dict:
        if self.inputs is None:
            generator = torch.Generator().manual_seed(self.config.data.shuffle_seed * 7919 + index)
            inputs = torch.randint(1, self.vocab_size, (len(self.rows), self.config.source_len),
                                   generator=generator)
            targets = torch.randint(1, self.vocab_size, (len(self.rows), self.config.target_len),
                                    generator=generator)
        else:
            picked = self.order.items(index * self.config.global_batch_size + self.rows)
            inputs = torch.from_numpy(self.inputs[picked])
            targets = torch.from_numpy(self.targets[picked])
        return pair_batch(inputs, targets, self.pad)


def pair_batch(inputs: torch.Tensor, targets: torch.Tensor, pad: int) -> dict:
    """The trainer's batch (Hugging Face keyword names) from padded input and target ids."""
    labels = torch.where(targets == pad, IGNORE_INDEX, targets)
    real_targets = (labels != IGNORE_INDEX).long()
    return {
        "input_ids": inputs,
        "attention_mask": (inputs != pad).long(),
        "decoder_input_ids": shift_right(labels, pad),
        # the start token, then the positions that hold a real target token
        "decoder_attention_mask": shift_right(real_targets, 1),
        "labels": labels,
    }
