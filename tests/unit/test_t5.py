"""T5 on the host: the seq2seq pair pipeline (encoding, host split, teacher forcing)."""

import torch

from zoo.data.text_pairs import PairBatches, encode
from zoo.tasks.seq2seq import Seq2SeqTrainConfig


def test_pairs_are_encoded_with_eos_padding_and_masked_labels():
    from core.data import load_tokenizer

    tokenizer = load_tokenizer("default")
    rows = encode(["reverse: apple stone", "x " * 50], tokenizer, 8)
    assert rows.shape == (2, 8) and rows[1, -1] == tokenizer.eos_token_id  # truncated + EOS
    config = Seq2SeqTrainConfig(global_batch_size=4)
    host = [PairBatches(config, tokenizer, 4096, k, 2).batch(7) for k in (0, 1)]
    whole = PairBatches(config, tokenizer, 4096, 0, 1).batch(7)
    assert torch.equal(torch.cat([h["labels"] for h in host]), whole["labels"])
    pad = tokenizer.pad_token_id
    shifted = torch.where(whole["labels"] == -100, pad, whole["labels"])[:, :-1]
    assert torch.equal(whole["decoder_input_ids"][:, 1:], shifted)  # teacher forcing
    assert (whole["decoder_input_ids"][:, 0] == pad).all()  # T5 starts from pad
