"""Remat config on the host (eager CPU): same gradients, strict names."""

import pytest
import torch

from tests.support.toy_model import SEQ, VOCAB, ToyModel
from zoo.core.remat import RematConfig, RematError, apply_remat


def loss_and_grads(remat: RematConfig):
    torch.manual_seed(0)
    model = ToyModel()
    apply_remat(model, remat)
    ids = torch.randint(0, VOCAB, (4, SEQ), generator=torch.Generator().manual_seed(1))
    loss = model(ids, ids.roll(-1, 1))
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def test_checkpointing_gives_the_same_gradients():
    ref_loss, ref = loss_and_grads(RematConfig())
    loss, grads = loss_and_grads(RematConfig(checkpoint=["Block"]))
    torch.testing.assert_close(loss, ref_loss, rtol=0, atol=0)
    for name in ref:
        torch.testing.assert_close(grads[name], ref[name], rtol=1e-6, atol=1e-7)


def test_unknown_layer_class_is_named():
    with pytest.raises(RematError, match="no layer of class 'DecoderLayer'.*Block"):
        apply_remat(ToyModel(), RematConfig(checkpoint=["DecoderLayer"]))


def test_scan_needs_a_layer_stack():
    with pytest.raises(RematError, match="'head' is not a LayerStack.*; stacks: layers"):
        apply_remat(ToyModel(), RematConfig(scan=["head"]))
