"""Sequence-to-sequence training: (input, target) text pairs in, teacher-forced cross
entropy out. Any model whose forward maps (input_ids, attention_mask, decoder_input_ids,
decoder_attention_mask) -> logits fits (T5).

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
import torch.nn.functional as F

from core.config import check_sizes
from core.data import IGNORE_INDEX, EpochOrder, check_seed, check_vocab, host_rows, load_table
from core.errors import UserError
from core.inputs import host_batch_size
from core.mesh import check_divides
from core.optim import OptimConfig
from core.run_config import TrainConfig, one_row_per_device, setting
from core.task import Task
from zoo.tasks.causal_lm import check_source, tokenizer_for, with_token_ids

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


@dataclasses.dataclass
class Seq2SeqTrainConfig(TrainConfig):
    source_len: int = 32
    target_len: int = 32
    global_batch_size: int = setting(32, from_slice=one_row_per_device)
    # Small encoder-decoders from scratch want a higher peak lr than the LM default.
    optim: OptimConfig = dataclasses.field(default_factory=lambda: OptimConfig(lr=3e-3))
    data: Seq2SeqDataConfig = dataclasses.field(default_factory=Seq2SeqDataConfig)

    def __post_init__(self):
        super().__post_init__()
        check_sizes(self, counts=("source_len", "target_len"), prefix="")
        check_divides(self)


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
    """This host's rows of global batch `i` (or random tokens when synthetic)."""

    def __init__(self, config: Seq2SeqTrainConfig, tokenizer, vocab_size: int,
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


class Seq2Seq(Task):
    name = "seq2seq"
    config_cls = Seq2SeqTrainConfig
    unit = "tokens"  # target tokens (padding included), as T5X counts them
    eval_backend = "seq2seq"

    def resolve(self, config: Seq2SeqTrainConfig) -> Seq2SeqTrainConfig:
        check_source(config.data.source)
        tokenizer = tokenizer_for(config)
        if tokenizer is None:
            return config
        if tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
            raise UserError("the tokenizer needs pad and eos tokens for seq2seq training")
        return with_token_ids(config, tokenizer, ("pad_token_id", "eos_token_id"))

    def data(self, config: Seq2SeqTrainConfig, process_index: int,
             process_count: int) -> PairBatches:
        tokenizer, vocab = tokenizer_for(config), config.model.vocab_size
        check_vocab(tokenizer, vocab)
        return PairBatches(config, tokenizer, vocab, process_index, process_count)

    def loss(self, model, batch):
        logits = model(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"],
                       batch["decoder_attention_mask"])
        labels = batch["labels"]
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                               ignore_index=IGNORE_INDEX)
        real = labels != IGNORE_INDEX
        hits = (logits.argmax(-1) == labels) & real
        return loss, {"token_accuracy": hits.sum() / real.sum().clamp(min=1)}

    def loss_weight(self, batch):
        return (batch["labels"] != IGNORE_INDEX).sum()

    def items_per_step(self, config: Seq2SeqTrainConfig) -> int:
        return config.global_batch_size * config.target_len

    def example_batch(self, config: Seq2SeqTrainConfig, seed: int = 0) -> dict:
        """Random pairs with padding."""
        generator = torch.Generator().manual_seed(seed)
        pad, vocab = config.model.pad_token_id, config.model.vocab_size
        rows = config.global_batch_size
        inputs = torch.randint(3, vocab, (rows, config.source_len), generator=generator)
        targets = torch.randint(3, vocab, (rows, config.target_len), generator=generator)
        inputs[0, config.source_len // 2 :] = pad
        targets[0, config.target_len // 2 :] = pad
        return pair_batch(inputs, targets, pad)

    def write_hf_extras(self, config, hf_config, folder) -> None:
        """Tokenizer files, and a generation config that starts decoding from pad, as T5
        does."""
        from transformers import GenerationConfig  # transformers

        tokenizer = tokenizer_for(config)
        if tokenizer is None:
            return
        tokenizer.save_pretrained(folder)
        GenerationConfig(decoder_start_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id).save_pretrained(folder)


SEQ2SEQ = Seq2Seq()
