"""`--tpu` against the runtime, checked before torch_xla starts (no XLA in this process)."""

import os

import pytest

from core.errors import UserError
from core.topology import parse
from zoo.app import train


def test_cpu_slices_set_the_virtual_device_count(monkeypatch):
    monkeypatch.setenv("CPU_NUM_DEVICES", "2")
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    topo = train.select_runtime(parse("cpu-4"))
    assert topo.devices == 4
    assert os.environ["CPU_NUM_DEVICES"] == "4" and os.environ["PJRT_DEVICE"] == "CPU"


def test_a_tpu_slice_on_a_machine_without_tpu_fails_fast(monkeypatch):
    monkeypatch.setattr(train.runtime, "on_tpu_vm", lambda: False)
    with pytest.raises(UserError, match="needs that TPU slice, but this machine has no TPU"):
        train.select_runtime(parse("v4-32"))


def test_a_different_tpu_type_names_the_one_found(monkeypatch):
    monkeypatch.setattr(train.runtime, "on_tpu_vm", lambda: True)
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v4-8")
    with pytest.raises(UserError, match="this TPU VM, which is a v4-8; use --tpu v4-8"):
        train.select_runtime(parse("v4-32"))


def test_the_matching_tpu_type_passes(monkeypatch):
    monkeypatch.setattr(train.runtime, "on_tpu_vm", lambda: True)
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v4-32")
    assert train.select_runtime(parse("v4-32")).chips == 16
    # each VM of a multi-slice job is one of its slices
    assert train.select_runtime(parse("2xv4-32")).chips == 32


# libtpu's refusal of a program that does not fit a chip, as torch_xla raises it
TPU_OOM = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory "
           "space hbm. Used 38.33G of 30.75G hbm. Exceeded hbm capacity by 7.59G.\n"
           "  1. Size: 448.00M\n     Operator: op_name=\"dot.1\"\n"
           "     Shape: bf16[8192,28672]{1,0:T(8,128)(2,1)}\n     Unpadded size: 448.00M\n"
           "     XLA label: all-gather.882 = all-gather(convert.3521)\n")


@pytest.mark.parametrize("message,refused", [(TPU_OOM, True), ("INTERNAL: other", False)])
def test_a_step_the_tpu_compiler_refuses_for_memory_stops_in_one_line(monkeypatch, message,
                                                                      refused):
    """The first step compiles in its sync: an out-of-memory refusal becomes one line with
    the compiler's numbers and what to do; any other error passes unchanged."""
    import sys
    import types

    from core.backends.xla import _sync_step

    def sync():
        raise RuntimeError(message)

    monkeypatch.setitem(sys.modules, "torch_xla", types.SimpleNamespace(sync=sync))
    expected = (UserError, "refused the train step: it needs at least 38.3 GiB per chip where "
                r"30.8 GiB are usable \(largest: 448.00M bf16\[8192,28672\] .all-gather.882.\); "
                "use a larger slice") if refused else (RuntimeError, "INTERNAL: other")
    with pytest.raises(expected[0], match=expected[1]) as caught:
        _sync_step()
    assert (type(caught.value) is UserError) == refused
