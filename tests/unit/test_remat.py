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


def test_unknown_scan_policy_is_named():
    with pytest.raises(RematError, match="remat policy 'offload' is not one of full, minimal"):
        RematConfig(checkpoint=["Block"], scan=["layers"], policy="offload")


@pytest.mark.parametrize("policy,saved", [("full", []), ("minimal", ["mm"])])
def test_scan_policies_save_the_inputs_and_what_they_name(policy, saved):
    """The partition torch_xla's scan gets: `full` hands backward only the layer's inputs
    (it recomputes the rest), `minimal` also the weight matmul outputs."""
    from functorch.compile import aot_function, make_boxed_func

    from zoo.core.remat import SCAN_POLICIES

    graphs = {}

    def keep(name):
        def compiler(graph, _inputs):
            graphs[name] = graph
            return make_boxed_func(graph.forward)
        return compiler

    def layer(x, w_in, w_out):
        return x + torch.nn.functional.silu(x @ w_in) @ w_out

    step = aot_function(layer, fw_compiler=keep("forward"), bw_compiler=keep("backward"),
                        partition_fn=SCAN_POLICIES[policy])
    x, w_in, w_out = (torch.randn(shape, requires_grad=True) for shape in ((4, 8), (8, 8), (8, 8)))
    step(x, w_in, w_out).sum().backward()
    outputs = next(n for n in graphs["forward"].graph.nodes if n.op == "output").args[0]
    kept = [n.target.__name__.split(".")[0] for n in outputs[1:] if n.op == "call_function"]
    assert kept == saved  # minimal: x @ w_in (silu's input); the last matmul's output is unused
    torch.testing.assert_close(x.grad, torch.func.grad(lambda x: layer(x, w_in, w_out).sum())(x))
