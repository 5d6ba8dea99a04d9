"""Supervised fine-tuning (`task=sft`) of any causal-LM family: instruction rows (prompt /
completion, or chat messages rendered by the tokenizer's template: zoo/data/sft_data.py)
become examples whose loss covers the completion or assistant turns only, packed into
fixed-length rows that keep them apart (zoo/data/sft_batches.py). The loss, its weight (the
trained tokens, so micro-batches, hosts and processes average exactly as one batch would),
validation and export are those of the family's own causal-LM task, which this subclasses
(zoo/tasks/variant.py): a mixture of experts keeps its router loss.

    zoo train llama-tiny task=sft --init-from runs/llama-tiny data.source=chats.jsonl
"""

from __future__ import annotations

import dataclasses
import inspect
import sys

from core.data import DataError, check_vocab, load_tokenizer
from zoo.data.sft_batches import SFTBatches
from zoo.data.sft_data import SFTDataConfig, describe, load_examples, read_once, recorded
from zoo.tasks.causal_lm import CausalLM, LMTrainConfig, with_token_ids
from zoo.tasks.variant import TaskVariant, on_top_of


@dataclasses.dataclass
class SFTTrainConfig(LMTrainConfig):
    data: SFTDataConfig = dataclasses.field(default_factory=SFTDataConfig)


_examples = read_once(load_examples)


class SupervisedFineTuning(CausalLM):
    name = "sft"
    config_cls = SFTTrainConfig
    sample_prompt = 'Repeat the word "zoo".'
    chat = True

    def __init__(self, model_cls: type):
        self.model_cls = model_cls

    def resolve(self, config: SFTTrainConfig) -> SFTTrainConfig:
        self.check_model(config.data)
        examples = _examples(config.data, config.seq_len)
        print(f"sft data: {describe(examples, config.data.truncation)}", file=sys.stderr)
        tokenizer = load_tokenizer(config.data.tokenizer)
        config = dataclasses.replace(config, data=recorded(config.data, examples.format))
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


VARIANT = TaskVariant(
    builds_on=CausalLM,
    build=lambda family_task, family: on_top_of(family_task, SupervisedFineTuning)(
        family.model_cls),
    rank=1)
