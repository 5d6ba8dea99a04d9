"""Causal language modelling on top of the generic trainer: packed token batches in,
next-token cross entropy out. Any model whose forward maps input_ids -> logits fits."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from core.data import DataConfig, TokenBatches, check_vocab, load_tokenizer
from core.trainer import TrainConfig, Trainer


@dataclasses.dataclass
class LMTrainConfig(TrainConfig):
    seq_len: int = 256
    data: DataConfig = dataclasses.field(default_factory=DataConfig)


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy, Hugging Face style: labels are the inputs (shifted
    here) and -100 marks positions that are not learned."""
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
    )


class LMTrainer(Trainer):
    throughput_unit = "tokens"

    @classmethod
    def prepare(cls, config: LMTrainConfig) -> dict:
        """Load the tokenizer (none for synthetic tokens) and give the model its ids."""
        if config.data.source == "synthetic":
            return {"tokenizer": None}
        tokenizer = load_tokenizer(config.data.tokenizer)
        config.model.bos_token_id = tokenizer.bos_token_id
        config.model.eos_token_id = tokenizer.eos_token_id
        config.model.pad_token_id = tokenizer.pad_token_id
        return {"tokenizer": tokenizer}

    def __init__(self, config: LMTrainConfig, model, rules, remat, *, tokenizer, **kwargs):
        import torch_xla.runtime as xr

        vocab = model.config.vocab_size
        check_vocab(tokenizer, vocab)
        super().__init__(config, model, rules, remat, **kwargs)
        self.data = TokenBatches(
            config.data,
            tokenizer,
            config.seq_len,
            config.global_batch_size,
            xr.process_index(),
            xr.process_count(),
            vocab_size=vocab,
        )

    @staticmethod
    def loss(model, batch):
        return causal_lm_loss(model(batch["input_ids"]), batch["labels"]), {}

    def host_batches(self, start: int):
        self.data.start = start
        return iter(self.data)

    @staticmethod
    def items_per_step(config: LMTrainConfig) -> int:
        return config.global_batch_size * config.seq_len


def lm_example_batch(run: LMTrainConfig, seed: int = 0) -> dict:
    """Random tokens with a few masked labels: a batch in LMTrainer's format, for tests."""
    generator = torch.Generator().manual_seed(seed)
    shape = (run.global_batch_size, run.seq_len)
    ids = torch.randint(0, run.model.vocab_size, shape, generator=generator)
    labels = ids.clone()
    labels[0, :5] = -100
    return {"input_ids": ids, "labels": labels}


def write_tokenizer_files(cfg, hf_config, folder) -> None:
    """For a Hugging Face export: tokenizer files and a generation config with its special
    tokens (none for runs trained on synthetic tokens)."""
    from transformers import GenerationConfig

    if cfg.data.source == "synthetic":
        return
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    tokenizer.save_pretrained(folder)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(hf_config, name, getattr(tokenizer, name))
    GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                     pad_token_id=tokenizer.pad_token_id).save_pretrained(folder)
