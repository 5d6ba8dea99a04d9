"""Direct preference optimisation (`task=dpo`; Rafailov et al., 2023) of any causal-LM family,
from a model you already have (`--init-from`). Preference rows (zoo/data/dpo_data.py) give
each pair's prompt + chosen and prompt + rejected responses, masked as SFT masks them; a row
holds whole pairs, each response a document of its own (segment ids, positions from 0:
zoo/data/packing.py), so nothing attends across responses or pairs. Per response, the
policy's and the reference's summed log-probabilities of its trained tokens give

    margin = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
    sigmoid: -log sigmoid(beta * margin)    hinge: relu(1 - beta * margin)
    ipo:     (margin per response token - 1 / (2 beta))^2

as TRL's DPOTrainer computes them, averaged over the step's pairs. The reference is the
starting point: under LoRA the same model with its adapters off (no second copy), otherwise a
frozen copy the task keeps, placed and sharded as the model (`bind`). Logged with the loss: the
rewards (beta x each response's log-ratio), their margin and how often chosen wins.

    zoo train --init-from runs/llama-tiny-sft task=dpo lora.rank=8
"""

from __future__ import annotations

import copy
import dataclasses
import sys

import torch
import torch.nn.functional as F

from core import lora
from core.data import check_vocab, load_tokenizer
from core.errors import UserError
from core.task import Placed, Task
from zoo.data.dpo_batches import DPOBatches
from zoo.data.dpo_data import DPODataConfig, describe, load_pairs
from zoo.data.packing import example_documents
from zoo.data.sft_data import read_once, recorded
from zoo.tasks.causal_lm import CausalLM, LMTrainConfig, documents, with_token_ids
from zoo.tasks.variant import TaskVariant, on_top_of

LOSS_TYPES = ("sigmoid", "hinge", "ipo")


@dataclasses.dataclass
class DPOConfig:
    beta: float = 0.1  # how far the policy may move from the reference
    loss_type: str = "sigmoid"  # sigmoid (DPO) | hinge (SLiC) | ipo

    def __post_init__(self):
        if not self.beta > 0 or self.beta == float("inf"):
            raise ValueError(f"dpo.beta must be a positive number, not {self.beta}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"dpo.loss_type must be one of {', '.join(LOSS_TYPES)}, "
                             f"not {self.loss_type!r}")


@dataclasses.dataclass
class DPOTrainConfig(LMTrainConfig):
    data: DPODataConfig = dataclasses.field(default_factory=DPODataConfig)
    dpo: DPOConfig = dataclasses.field(default_factory=DPOConfig)


def preference_loss(policy: torch.Tensor, reference: torch.Tensor, config: DPOConfig,
                    response_tokens: torch.Tensor | None = None) -> tuple:
    """(per-pair loss, chosen rewards, rejected rewards) from [..., 2] summed
    log-probabilities (chosen, rejected) of the policy and the reference; `response_tokens`
    ([..., 2], trained tokens per response) only for ipo, which compares per-token means."""
    ratios = policy - reference  # log pi/pi_ref, per response
    margin = ratios[..., 0] - ratios[..., 1]
    if config.loss_type == "sigmoid":
        losses = -F.logsigmoid(config.beta * margin)
    elif config.loss_type == "hinge":
        losses = torch.relu(1 - config.beta * margin)
    else:
        per_token = ratios / response_tokens.clamp(min=1)
        losses = (per_token[..., 0] - per_token[..., 1] - 1 / (2 * config.beta)) ** 2
    rewards = config.beta * ratios.detach()
    return losses, rewards[..., 0], rewards[..., 1]


def response_logps(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """([rows, pairs, 2] summed log-probabilities of each pair's chosen and rejected
    response, [rows, pairs, 2] their trained tokens) under `model`."""
    logits = model(batch["input_ids"], **documents(batch))
    targets = batch["labels"][:, 1:]
    token_logps = -F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), targets.flatten(),
                                   ignore_index=-100, reduction="none").view(targets.shape)
    trained = (targets != -100)
    segments = batch["segment_ids"][:, 1:]  # the response each predicted token belongs to
    slots = 2 * batch["pairs"].shape[1] + 1  # segment 0 is padding; 2k+1, 2k+2 pair k's
    sums = torch.zeros(targets.shape[0], slots, device=logits.device)
    sums = sums.scatter_add(1, segments, token_logps * trained)
    counts = torch.zeros_like(sums).scatter_add(1, segments, trained.float())
    return sums[:, 1:].unflatten(1, (-1, 2)), counts[:, 1:].unflatten(1, (-1, 2))


class DirectPreference(CausalLM):
    name = "dpo"
    config_cls = DPOTrainConfig
    sample_prompt = 'Repeat the word "zoo".'
    chat = True
    reference_forwards = 1  # the reference's forward in every step (counted in MFU)

    def __init__(self):
        self.reference: torch.nn.Module | None = None  # None: the model, adapters off
        self.config = DPOConfig()

    def resolve(self, config: DPOTrainConfig) -> DPOTrainConfig:
        if not config.init_from:
            raise UserError("task=dpo tunes a model against itself as it starts (the "
                            "reference), so it starts from one: add --init-from RUN_OR_HF_DIR")
        if config.eval_every:
            raise UserError("task=dpo has no validation pass yet (its rewards are logged every "
                            "step); set eval_every=0")
        pairs = _pairs(config.data, config.seq_len)
        print(f"dpo data: {describe(pairs, config.data.truncation)}", file=sys.stderr)
        tokenizer = load_tokenizer(config.data.tokenizer)
        config = dataclasses.replace(config, data=recorded(config.data, pairs.format))
        return with_token_ids(config, tokenizer, ("bos_token_id", "eos_token_id", "pad_token_id"))

    def data(self, config: DPOTrainConfig, process_index: int, process_count: int) -> DPOBatches:
        tokenizer = load_tokenizer(config.data.tokenizer)
        check_vocab(tokenizer, config.model.vocab_size, config.init_from)
        pad = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
        batches = DPOBatches(_pairs(config.data, config.seq_len), config.seq_len,
                             config.global_batch_size, process_index, process_count, pad,
                             config.data.shuffle_seed)
        if process_index == 0:
            print(f"dpo rows: {batches.describe()}", file=sys.stderr)
        return batches

    def bind(self, model, config: DPOTrainConfig, place) -> Task:
        """This task comparing `model` with itself as it starts, with the run's beta and
        loss: the model with its LoRA adapters off, or else a frozen copy of it, placed as
        the model is."""
        bound = copy.copy(self)
        if not lora.has_adapters(model):
            bound.reference = place(copy.deepcopy(model).requires_grad_(False))
        bound.config = config.dpo
        return bound

    def placed(self, config: DPOTrainConfig, params) -> list[Placed]:
        """What `bind` places beside the model: under LoRA nothing (the reference is the
        model with its adapters off), else the frozen copy, each device holding what it
        holds of the model's own weights (same sharding, same dtype)."""
        if config.lora.enabled:
            return []
        return [Placed("reference model (frozen copy)", sum(p.shard_bytes for p in params))]

    def loss(self, model, batch):
        policy, tokens = response_logps(model, batch)
        with torch.no_grad():
            if self.reference is not None:
                reference, _ = response_logps(self.reference, batch)
            else:
                with lora.adapters_off(model):
                    reference, _ = response_logps(model, batch)
        losses, chosen, rejected = preference_loss(policy, reference, self.config, tokens)
        pairs = batch["pairs"].float()
        count = pairs.sum().clamp(min=1)

        def mean(values):
            return (values * pairs).sum() / count

        return mean(losses), {
            "rewards_chosen": mean(chosen), "rewards_rejected": mean(rejected),
            "reward_margin": mean(chosen - rejected),
            "reward_accuracy": mean((chosen > rejected).float()),
        }

    def loss_weight(self, batch):
        return batch["pairs"].sum()  # the loss is a mean over pairs

    def example_batch(self, config: DPOTrainConfig, seed: int = 0) -> dict:
        """Random tokens in rows of one pair each: its two responses as two documents."""
        batch = super().example_batch(config, seed)
        shape = batch["input_ids"].shape
        return {"input_ids": batch["input_ids"], "labels": batch["labels"],
                **example_documents(shape, documents=2),
                "pairs": torch.ones(shape[0], 1, dtype=torch.bool)}


_pairs = read_once(load_pairs)


VARIANT = TaskVariant(
    builds_on=CausalLM,
    build=lambda family_task, family: on_top_of(family_task, DirectPreference)(),
    rank=2)
