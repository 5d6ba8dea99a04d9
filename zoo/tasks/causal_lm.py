"""Causal language modelling: packed token rows in (zoo/tasks/packed_text.py), next-token
cross entropy out. Any model whose forward maps input_ids -> logits fits."""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from zoo.core.data import check_vocab, load_tokenizer, local_files
from zoo.core.engine import TrainConfig
from zoo.core.task import Task
from zoo.tasks.packed_text import DataConfig, TokenBatches


@dataclasses.dataclass
class LMTrainConfig(TrainConfig):
    seq_len: int = 256
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    eval_every: int = 0  # steps between validation passes (and at the end); 0: never
    eval_rows: int = 64  # rows of seq_len held out from training for validation

    def __post_init__(self):
        super().__post_init__()
        if self.eval_every < 0 or self.eval_rows < 1:
            raise ValueError(f"eval_every must be >= 0 and eval_rows >= 1, got "
                             f"{self.eval_every} and {self.eval_rows}")
        # the run schema (zoo/compose.py) adds `model`; a bare LMTrainConfig has none
        longest = getattr(getattr(self, "model", None), "max_position_embeddings", None)
        if longest and self.seq_len > longest:
            raise ValueError(f"seq_len {self.seq_len} is longer than the model's "
                             f"max_position_embeddings ({longest}); use seq_len<={longest}")


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy, Hugging Face style: labels are the inputs (shifted
    here) and -100 marks positions that are not learned."""
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
    )


def with_token_ids(config, tokenizer, names: tuple[str, ...]):
    """A copy of the run config whose model carries the tokenizer's special-token ids."""
    ids = {name: getattr(tokenizer, name) for name in names}
    return dataclasses.replace(config, model=dataclasses.replace(config.model, **ids))


def check_source(source: str) -> None:
    """A local data source that is missing or empty fails now, before anything is built."""
    if source not in ("default", "synthetic"):
        local_files(source)  # raises a one-line DataError; None for a Hub name


def tokenizer_for(config):
    """The run's tokenizer, or None when it trains on synthetic tokens."""
    return None if config.data.source == "synthetic" else load_tokenizer(config.data.tokenizer)


class CausalLM(Task):
    name = "causal-lm"
    config_cls = LMTrainConfig
    unit = "tokens"
    eval_backend = "causal"
    generates_text = True

    def resolve(self, config: LMTrainConfig) -> LMTrainConfig:
        check_source(config.data.source)
        tokenizer = tokenizer_for(config)
        if tokenizer is None:
            return config
        return with_token_ids(config, tokenizer, ("bos_token_id", "eos_token_id", "pad_token_id"))

    def data(self, config: LMTrainConfig, process_index: int, process_count: int) -> TokenBatches:
        tokenizer, vocab = tokenizer_for(config), config.model.vocab_size
        check_vocab(tokenizer, vocab)
        return TokenBatches(config.data, tokenizer, config.seq_len, config.global_batch_size,
                            process_index, process_count, vocab_size=vocab,
                            held_out=config.eval_rows if config.eval_every else 0)

    def loss(self, model, batch):
        return causal_lm_loss(model(batch["input_ids"]), batch["labels"]), {}

    def items_per_step(self, config: LMTrainConfig) -> int:
        return config.global_batch_size * config.seq_len

    def example_batch(self, config: LMTrainConfig, seed: int = 0) -> dict:
        """Random tokens with a few masked labels."""
        generator = torch.Generator().manual_seed(seed)
        shape = (config.global_batch_size, config.seq_len)
        ids = torch.randint(0, config.model.vocab_size, shape, generator=generator)
        labels = ids.clone()
        labels[0, :5] = -100
        return {"input_ids": ids, "labels": labels}

    def after_step(self, engine, step: int) -> dict | None:
        every = engine.config.eval_every
        if not every or (step % every and step != engine.config.steps):
            return None
        loss = validation_loss(engine)
        return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 80.0))}

    def write_hf_extras(self, config, hf_config, folder) -> None:
        """Tokenizer files and a generation config with its special tokens (none for runs
        trained on synthetic tokens)."""
        from transformers import GenerationConfig

        tokenizer = tokenizer_for(config)
        if tokenizer is None:
            return
        tokenizer.save_pretrained(folder)
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            setattr(hf_config, name, getattr(tokenizer, name))
        GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id).save_pretrained(folder)


def validation_loss(engine) -> float:
    """Mean next-token loss over every held-out token: sums accumulate on the device, one
    compiled graph per batch shape, one transfer at the end."""
    import torch_xla

    from zoo.core.inputs import device_loader

    batches = engine.data.validation_batches
    total = count = None
    with torch.no_grad():
        for batch in device_loader(batches(), engine.mesh, next(batches())):
            with engine.autocast():
                logits = engine.model(batch["input_ids"])
            labels = batch["labels"][:, 1:]
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels.flatten(),
                                   ignore_index=-100, reduction="sum")
            tokens = (labels != -100).sum()
            total = loss if total is None else total + loss
            count = tokens if count is None else count + tokens
            torch_xla.sync()
    return float(total) / max(int(count), 1)


CAUSAL_LM = CausalLM()
