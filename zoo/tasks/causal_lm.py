"""Causal language modelling: packed token rows in (zoo/data/packed_text.py), next-token
cross entropy out. Any model whose forward maps input_ids -> logits fits."""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from core.data import check_vocab, load_tokenizer, local_files
from core.mesh import check_divides
from core.remat import checkpointed
from core.run_config import TrainConfig, setting
from core.task import Task
from zoo.data.packed_text import DataConfig, TokenBatches, tokenize_corpus
from zoo.data.packing import example_documents


@dataclasses.dataclass
class LMTrainConfig(TrainConfig):
    seq_len: int = 256
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    # steps between validation passes (and at the end); 0: never
    eval_every: int = setting(0, resumable=True)
    eval_rows: int = 64  # rows of seq_len held out from training for validation

    def __post_init__(self):
        super().__post_init__()
        if self.eval_every < 0 or self.eval_rows < 1:
            raise ValueError(f"eval_every must be >= 0 and eval_rows >= 1, got "
                             f"{self.eval_every} and {self.eval_rows}")
        # the run schema (zoo/app/run.py) adds `model`; a bare LMTrainConfig has none
        longest = getattr(getattr(self, "model", None), "max_position_embeddings", None)
        if longest and self.seq_len > longest:
            raise ValueError(f"seq_len {self.seq_len} is longer than the model's "
                             f"max_position_embeddings ({longest}); use seq_len<={longest}")
        check_divides(self, {"sequence": {"seq_len": self.seq_len}})


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy, Hugging Face style: labels are the inputs and -100
    marks positions that are not learned. The targets are shifted, not the logits: slicing
    off the last position copied the whole [batch, seq, vocab] logits on a TPU."""
    return F.cross_entropy(logits.flatten(0, 1).float(), next_token_targets(labels).flatten(),
                           ignore_index=-100)


def next_token_targets(labels: torch.Tensor) -> torch.Tensor:
    """What each position predicts: the next label, and nothing (-100) at the last."""
    return torch.cat((labels[:, 1:], torch.full_like(labels[:, :1], -100)), dim=1)


def loss_chunks(seq_len: int, chunk_tokens: int) -> int:
    """How many chunks the loss of a sequence runs in: the fewest that divide it into
    chunks of at most `chunk_tokens` positions (1: not chunked)."""
    if not chunk_tokens or seq_len <= chunk_tokens:
        return 1
    return next(n for n in range(-(-seq_len // chunk_tokens), seq_len + 1) if seq_len % n == 0)


def chunked_causal_lm_loss(hidden: torch.Tensor, head, labels: torch.Tensor,
                           chunks: int) -> torch.Tensor:
    """`causal_lm_loss(head(hidden), labels)` computed `chunks` slices of the sequence at a
    time, each slice's logits recomputed in backward (checkpointed), so only one slice's
    logits are ever held. Slices are strided (positions i, i + chunks, ...), so under
    context parallelism every device holds its share of each."""
    targets = next_token_targets(labels)

    def summed_loss(hidden_slice, target_slice):
        logits = head(hidden_slice).flatten(0, 1).float()
        return F.cross_entropy(logits, target_slice.flatten(), ignore_index=-100, reduction="sum")

    strided_hidden = hidden.unflatten(1, (-1, chunks))
    strided_targets = targets.unflatten(1, (-1, chunks))
    total = sum(checkpointed(summed_loss, strided_hidden[:, :, i], strided_targets[:, :, i])
                for i in range(chunks))
    return total / (targets != -100).sum()


DOCUMENT_KEYS = ("segment_ids", "positions")


def documents(batch: dict) -> dict:
    """What a packed batch tells the model about the documents in its rows (segment ids and
    positions: zoo/data/packing.py), as keyword arguments; none for unpacked rows."""
    return {key: batch[key] for key in DOCUMENT_KEYS if key in batch}


def next_token_loss(model, batch: dict) -> torch.Tensor:
    """The training loss of a batch. A model that splits its forward into
    `hidden_states(input_ids)` and `logits(hidden)` gets it by `loss_from_hidden`; any
    other from `model(input_ids)`."""
    input_ids, labels, kept_apart = batch["input_ids"], batch["labels"], documents(batch)
    if not hasattr(model, "hidden_states"):
        return causal_lm_loss(model(input_ids, **kept_apart), labels)
    return loss_from_hidden(model, model.hidden_states(input_ids, **kept_apart), labels)


def loss_from_hidden(model, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss from final hidden states, in chunks of at most `model.loss_chunk_tokens`
    positions per sequence when the sequence is longer."""
    chunks = loss_chunks(hidden.shape[1], model.loss_chunk_tokens)
    if chunks == 1:
        return causal_lm_loss(model.logits(hidden), labels)
    return chunked_causal_lm_loss(hidden, model.logits, labels, chunks)


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
        # Read and check the documents now, before a model is built (data() reuses them).
        tokenize_corpus(config.data, tokenizer)
        return with_token_ids(config, tokenizer, ("bos_token_id", "eos_token_id", "pad_token_id"))

    def data(self, config: LMTrainConfig, process_index: int, process_count: int) -> TokenBatches:
        tokenizer, vocab = tokenizer_for(config), config.model.vocab_size
        check_vocab(tokenizer, vocab, config.init_from)
        return TokenBatches(config.data, tokenizer, config.seq_len, config.global_batch_size,
                            process_index, process_count, vocab_size=vocab,
                            held_out=config.eval_rows if config.eval_every else 0)

    def loss(self, model, batch):
        return next_token_loss(model, batch), {}

    def loss_weight(self, batch):
        return (batch["labels"][:, 1:] != -100).sum()

    def items_per_step(self, config: LMTrainConfig) -> int:
        return config.global_batch_size * config.seq_len

    def example_batch(self, config: LMTrainConfig, seed: int = 0) -> dict:
        """Random tokens with a few masked labels (in documents kept apart, where the run
        keeps them apart)."""
        generator = torch.Generator().manual_seed(seed)
        shape = (config.global_batch_size, config.seq_len)
        ids = torch.randint(0, config.model.vocab_size, shape, generator=generator)
        labels = ids.clone()
        labels[0, :5] = -100
        batch = {"input_ids": ids, "labels": labels}
        return batch | example_documents(shape) if keeps_documents_apart(config) else batch

    def after_step(self, engine, step: int) -> dict | None:
        every = engine.config.eval_every
        if not every or (step % every and step != engine.config.steps):
            return None
        loss = validation_loss(engine)
        return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 80.0))}

    def write_hf_extras(self, config, hf_config, folder) -> None:
        """Tokenizer files and a generation config with its special tokens (none for runs
        trained on synthetic tokens)."""
        from transformers import GenerationConfig  # transformers

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
    backend, batches = engine.backend, engine.data.validation_batches
    total = count = None
    with torch.no_grad():
        for batch in backend.loader(batches(), engine.mesh, next(batches())):
            with engine.autocast():
                logits = backend.run(_logits, engine.model, batch)
            labels = batch["labels"][:, 1:]
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels.flatten(),
                                   ignore_index=-100, reduction="sum")
            tokens = (labels != -100).sum()
            total = loss if total is None else total + loss
            count = tokens if count is None else count + tokens
            backend.sync()
    return float(backend.total(total)) / max(int(backend.total(count)), 1)


def _logits(model, batch: dict) -> torch.Tensor:
    return model(batch["input_ids"], **documents(batch))


def keeps_documents_apart(config) -> bool:
    """Whether the run's rows hold documents kept apart (segment ids in every batch)."""
    return bool(getattr(config.data, "document_mask", False) or
                getattr(config.data, "packing", False))


CAUSAL_LM = CausalLM()
