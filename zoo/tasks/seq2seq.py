"""Sequence-to-sequence training: (input, target) text pairs in, teacher-forced cross
entropy out. Any model whose forward maps (input_ids, attention_mask, decoder_input_ids,
decoder_attention_mask) -> logits fits (T5).

The pairs, their tokens and batches: zoo/data/text_pairs.py.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from core.config import check_sizes
from core.data import IGNORE_INDEX, check_vocab
from core.errors import UserError
from core.mesh import check_divides
from core.optim import OptimConfig
from core.run_config import TrainConfig, one_row_per_device, setting
from core.task import Task
from zoo.data.text_pairs import PairBatches, Seq2SeqDataConfig, pair_batch
from zoo.tasks.causal_lm import check_source, tokenizer_for, with_token_ids


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
