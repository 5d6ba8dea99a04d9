"""The causal LM loss in chunks of the sequence equals the loss over whole logits."""

import dataclasses

import pytest
import torch

from zoo.llama.config import LlamaConfig
from zoo.llama.model import LlamaForCausalLM
from zoo.tasks.causal_lm import causal_lm_loss, loss_chunks, next_token_loss


@pytest.mark.parametrize("seq_len,chunk,chunks", [(256, 0, 1), (256, 1024, 1), (8192, 1024, 8),
                                                  (3000, 1024, 3), (97, 32, 97)])
def test_chunk_count_divides_the_sequence(seq_len, chunk, chunks):
    assert loss_chunks(seq_len, chunk) == chunks


def test_chunked_loss_and_gradients_equal_the_whole_loss():
    torch.manual_seed(0)
    model = LlamaForCausalLM(dataclasses.replace(LlamaConfig(num_hidden_layers=2),
                                                 loss_chunk_tokens=32))
    model.init_weights()
    ids = torch.randint(0, 4096, (2, 128), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[0, :5] = -100
    whole = causal_lm_loss(model(ids), labels)
    whole.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    # 4 strided chunks, each checkpointed
    chunked = next_token_loss(model, {"input_ids": ids, "labels": labels})
    chunked.backward()
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=0)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected[name], rtol=1e-5, atol=1e-7)
