"""The SFT loss is transformers' loss with the prompt labelled -100: on the same rows, our
llama's masked loss equals `LlamaForCausalLM(input_ids, labels=...)`'s (fp32, 1e-5), for
prompt/completion rows and chat rows, with the labels derived here from the prompts alone
(not from the mask under test). Packed, the same examples give the same token-mean loss."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from core.data import load_tokenizer
from zoo.data.sft_batches import SFTBatches
from zoo.data.sft_data import SFTDataConfig, load_examples
from zoo.registry import family
from zoo.tasks.sft import SFTTrainConfig

SEQ = 96
PAIRS = [("What is 2 + 3?", " 5"), ("Say hi.", " hi"), ("Name a color:", " blue, or red"),
         ("Count to three.", " one two three")]
CHATS = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": q},
          {"role": "assistant", "content": a.strip()}] for q, a in PAIRS]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("default")


@pytest.fixture(scope="module")
def models():
    """Our tiny llama and transformers' LlamaForCausalLM with the same weights."""
    import transformers

    fam = family("llama")
    config = dataclasses.replace(fam.sizes["tiny"], num_hidden_layers=2, attention="plain")
    ours = fam.build(config, seed=0).eval()
    theirs = transformers.LlamaForCausalLM(fam.hf_config(config)).eval()
    theirs.load_state_dict(ours.state_dict(), strict=False)
    return ours, theirs


def examples(tmp_path, rows, tokenizer, **options):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = SFTDataConfig(source=str(path), cache_dir=str(tmp_path / "cache"), **options)
    return config, load_examples(config, tokenizer, SEQ)


def rows(config, found, tokenizer, packing: bool) -> tuple[dict, list[int]]:
    """(every example's row, or the packed rows, as the trainer batches them; the examples
    in row order)."""
    config = dataclasses.replace(config, packing=packing)
    batches = SFTBatches(found, config, SEQ, global_batch_size=1, process_index=0,
                         process_count=1, pad_id=tokenizer.pad_token_id)
    return batches._rows(np.arange(batches.rows.count)), batches.rows.members.tolist()


def hf_labels(ids: torch.Tensor, prompt_lengths: list[int], pad: int) -> torch.Tensor:
    """Labels as transformers users write them: the prompt and the padding -100."""
    labels = ids.clone()
    for row, length in enumerate(prompt_lengths):
        labels[row, :length] = -100
    return labels.masked_fill(ids == pad, -100)


def prompt_length_of_pair(tokenizer, prompt: str) -> int:
    return 1 + len(tokenizer(prompt, add_special_tokens=False)["input_ids"])  # BOS + prompt


def prompt_length_of_chat(tokenizer, chat: list[dict]) -> int:
    return len(tokenizer.apply_chat_template(chat[:-1], add_generation_prompt=True,
                                             tokenize=True, return_dict=False))


def our_loss(model, batch: dict) -> torch.Tensor:
    task = family("llama").task_named("sft")
    with torch.no_grad():
        return task.loss(model, batch)[0]


# rows as the data holds them, and each row's prompt length as a transformers user counts it
FORMATS = {
    "prompt-completion": ([{"prompt": p, "completion": c} for p, c in PAIRS],
                          lambda tokenizer, e: prompt_length_of_pair(tokenizer, PAIRS[e][0])),
    "chat": ([{"messages": chat} for chat in CHATS],
             lambda tokenizer, e: prompt_length_of_chat(tokenizer, CHATS[e])),
}


@pytest.mark.parametrize("form", FORMATS)
def test_loss_equals_transformers_with_the_prompt_masked(tmp_path, tokenizer, models, form):
    ours, theirs = models
    data, prompt_length = FORMATS[form]
    config, found = examples(tmp_path, data, tokenizer)
    batch, order = rows(config, found, tokenizer, packing=False)
    lengths = [prompt_length(tokenizer, e) for e in order]
    labels = hf_labels(batch["input_ids"], lengths, tokenizer.pad_token_id)
    with torch.no_grad():
        expected = theirs(batch["input_ids"], labels=labels).loss
    torch.testing.assert_close(our_loss(ours, batch), expected, rtol=0, atol=1e-5)


def test_packed_rows_give_the_unpacked_token_mean(tmp_path, tokenizer, models):
    ours, _ = models
    config, found = examples(tmp_path, [{"messages": chat} for chat in CHATS], tokenizer)
    packed, _ = rows(config, found, tokenizer, packing=True)
    unpacked, _ = rows(config, found, tokenizer, packing=False)
    assert len(packed["input_ids"]) < len(unpacked["input_ids"])  # several examples per row
    trained = (unpacked["labels"] != -100).sum()
    assert (packed["labels"] != -100).sum() == trained
    torch.testing.assert_close(our_loss(ours, packed), our_loss(ours, unpacked),
                               rtol=0, atol=1e-5)


def test_the_sft_config_keeps_the_pretraining_fields():
    """task=sft reads the causal-LM run's fields (seq_len, eval_every) with its own data."""
    config = SFTTrainConfig()
    assert isinstance(config.data, SFTDataConfig) and config.seq_len == 256
