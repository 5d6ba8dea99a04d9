"""Remat config on the host (eager CPU): same gradients, strict names."""

import pytest
import torch

from core.remat import RematConfig, RematError, apply_remat
from tests.support.toy_model import SEQ, VOCAB, ToyModel


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


def test_a_stack_scans_its_alike_tail_and_keeps_the_leading_layers_apart():
    """DeepSeek's dense layers before its routed ones: the first layer's weights differ, so
    it keeps its per-layer names and only the rest are stacked; the stacked model computes
    the same, and its state dict unstacks to the per-layer names and values it had."""
    from core.remat import unstack_weights
    from tests.support.toy_model import DIM, Block

    torch.manual_seed(0)
    model = ToyModel()
    model.layers[0].extra = torch.nn.Linear(DIM, DIM)  # only the first layer has it
    before = {name: value.clone() for name, value in model.state_dict().items()}
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    expected = model(ids, ids)
    apply_remat(model, RematConfig(checkpoint=["Block"], scan=["layers"]))
    names = {name.split(".")[1] for name in model.state_dict() if name.startswith("layers.")}
    assert names == {"0", "*"}
    assert model.layers.depth == 2
    assert isinstance(model.layers[0], Block) and hasattr(model.layers[0], "extra")
    torch.testing.assert_close(model(ids, ids), expected, rtol=0, atol=0)
    after = unstack_weights(model.state_dict())
    assert after.keys() == before.keys()
    for name, value in before.items():
        assert torch.equal(after[name], value), name


def test_unknown_layer_class_is_named():
    with pytest.raises(RematError, match="no layer of class 'DecoderLayer'.*Block"):
        apply_remat(ToyModel(), RematConfig(checkpoint=["DecoderLayer"]))


def test_scan_needs_a_layer_stack():
    with pytest.raises(RematError, match="'head' is not a LayerStack.*; stacks: layers"):
        apply_remat(ToyModel(), RematConfig(scan=["head"]))


def test_unknown_scan_policy_is_named():
    with pytest.raises(RematError, match="remat policy 'some' is not one of full, minimal"):
        RematConfig(checkpoint=["Block"], scan=["layers"], policy="some")


def test_offload_is_refused_off_a_tpu_in_one_line():
    remat = RematConfig(checkpoint=["Block"], scan=["layers"], policy="offload")
    remat.check_device(on_tpu=True)
    with pytest.raises(RematError, match="runs on a TPU only; here use scan_checkpoint"):
        remat.check_device(on_tpu=False)


def layer(x, w_in, w_out):
    """A layer with one named tensor (as llama names its query projection)."""
    from core.remat import checkpoint_name

    hidden = checkpoint_name(checkpoint_name(x, "decoder_layer_input") @ w_in, "query_proj")
    return x + torch.nn.functional.silu(hidden) @ w_out


def partitioned(policy, device="cpu"):
    """(forward graph, backward graph, (x, w_in, w_out) with their gradients) of `layer`
    under a scan policy."""
    from functorch.compile import aot_function, make_boxed_func

    from core.remat import SCAN_POLICIES

    graphs = {}

    def keep(name):
        def compiler(graph, _inputs):
            graphs[name] = graph
            return make_boxed_func(graph.forward)
        return compiler

    step = aot_function(layer, fw_compiler=keep("forward"), bw_compiler=keep("backward"),
                        partition_fn=SCAN_POLICIES[policy])
    x, w_in, w_out = (torch.randn(shape, device=device, requires_grad=True)
                      for shape in ((4, 8), (8, 8), (8, 8)))
    step(x, w_in, w_out).sum().backward()
    return graphs["forward"], graphs["backward"], (x, w_in, w_out)


@pytest.mark.parametrize("policy,saved", [("full", []), ("minimal", ["mm"]),
                                          ("save_qkv_proj", ["checkpoint_name"])])
def test_scan_policies_save_the_inputs_and_what_they_name(policy, saved):
    """The partition torch_xla's scan gets: `full` hands backward only the layer's inputs
    (it recomputes the rest), `minimal` also the weight matmul outputs, `save_qkv_proj` the
    tensors named query/key/value_proj."""
    forward, _, (x, w_in, w_out) = partitioned(policy)
    outputs = next(n for n in forward.graph.nodes if n.op == "output").args[0]
    kept = [n.target.__name__.split(".")[0] for n in outputs[1:] if n.op == "call_function"]
    assert kept == saved  # minimal: x @ w_in (silu's input); the last matmul's output is unused
    fresh = x.detach().requires_grad_()
    expected, = torch.autograd.grad(layer(fresh, w_in, w_out).sum(), fresh)
    torch.testing.assert_close(x.grad, expected)


OFFLOAD = """
import torch, torch_xla
from tests.unit.test_remat import partitioned
forward, backward, _ = partitioned("offload", torch_xla.device())
def calls(graph):
    return [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
print(calls(forward).count("xla.place_to_host.default"),
      calls(backward).count("xla.place_to_device.default"))
"""


def test_offload_moves_the_layer_input_to_host_and_back():
    """`offload`: as `full`, and the saved layer input leaves for host memory after the
    forward and comes back for the backward (traced on XLA; only a TPU runs it)."""
    import os
    import subprocess
    import sys

    from tests.support.paths import ROOT

    result = subprocess.run([sys.executable, "-c", OFFLOAD], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "PJRT_DEVICE": "CPU"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-2:] == ["1", "1"]


WAIT_ORDER = """
import torch, torch_xla
import torch_xla.experimental.scan as xla_scan
from core.backends.xla import scan_backward
from core.remat import LayerStack

events = []
lower = xla_scan._scan_impl_flat
def lowering(fn, init, xs, reverse=False):
    events.append("backward lowered" if reverse else "forward lowered")
    return lower(fn, init, xs, reverse=reverse)
xla_scan._scan_impl_flat = lowering
scan_backward._wait_for_devices = lambda grad: events.append("waited")

torch.manual_seed(0)
stack = LayerStack([torch.nn.Linear(8, 8) for _ in range(3)])
stack.scan = True
stack.stack_weights()
stack.to(torch_xla.device())
hidden = torch.randn(4, 8, device=torch_xla.device(), requires_grad=True)
stack(hidden).sum().backward()
torch_xla.sync()
print(events, bool(hidden.grad.abs().sum() > 0))
"""


def test_a_scanned_stack_waits_for_the_devices_before_its_backward_is_lowered():
    """torch_xla's scan lowers its backward body while the step is traced, reading the
    buffers of the scanned weights: the previous step's outputs, placeholders until its
    asynchronous execution ends (core/backends/xla/scan_backward.py). The wait comes after
    the forward (which keeps overlapping that execution) and before the backward's
    lowering."""
    import os
    import subprocess
    import sys

    from tests.support.paths import ROOT

    result = subprocess.run([sys.executable, "-c", WAIT_ORDER], cwd=ROOT, capture_output=True,
                            text=True, timeout=900, env={**os.environ, "PJRT_DEVICE": "CPU"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == (
        "['forward lowered', 'waited', 'backward lowered'] True")
