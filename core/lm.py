"""Causal language modelling on top of the generic trainer: packed token batches in,
next-token cross entropy out. Any model whose forward maps input_ids -> logits fits."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from core.data import DataConfig, TokenBatches
from core.errors import UserError
from core.flops import train_flops_per_token
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

    def __init__(
        self,
        config: LMTrainConfig,
        model,
        rules,
        remat,
        *,
        tokenizer,
        forward_flops_per_token: float,
    ):
        import torch_xla.runtime as xr

        vocab = model.config.vocab_size
        if tokenizer is not None and len(tokenizer) > vocab:
            raise UserError(
                f"tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
                f"{vocab}; set model.vocab_size={len(tokenizer)} or another tokenizer"
            )
        super().__init__(config, model, rules, remat)
        self.data = TokenBatches(
            config.data,
            tokenizer,
            config.seq_len,
            config.global_batch_size,
            xr.process_index(),
            xr.process_count(),
            vocab_size=vocab,
        )
        self._flops_per_token = train_flops_per_token(forward_flops_per_token)

    def forward(self, batch):
        logits = self.model(batch["input_ids"])
        return causal_lm_loss(logits, batch["labels"]), {}

    def host_batches(self, start: int):
        self.data.start = start
        return iter(self.data)

    def items_per_step(self) -> int:
        return self.config.global_batch_size * self.config.seq_len

    def flops_per_step(self) -> float:
        return self._flops_per_token * self.items_per_step()
