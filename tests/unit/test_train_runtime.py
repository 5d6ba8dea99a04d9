"""`--tpu` against the runtime, checked before torch_xla starts (no XLA in this process)."""

import os

import pytest

from zoo import compose
from zoo.core.errors import UserError


def test_cpu_slices_set_the_virtual_device_count(monkeypatch):
    monkeypatch.setenv("CPU_NUM_DEVICES", "2")
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    topo = compose.select_runtime("cpu-4")
    assert topo.devices == 4
    assert os.environ["CPU_NUM_DEVICES"] == "4" and os.environ["PJRT_DEVICE"] == "CPU"


def test_a_tpu_slice_on_a_machine_without_tpu_fails_fast(monkeypatch):
    monkeypatch.setattr(compose.runtime, "on_tpu_vm", lambda: False)
    with pytest.raises(UserError, match="needs that TPU slice, but this machine has no TPU"):
        compose.select_runtime("v4-32")


def test_a_different_tpu_type_names_the_one_found(monkeypatch):
    monkeypatch.setattr(compose.runtime, "on_tpu_vm", lambda: True)
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v4-8")
    with pytest.raises(UserError, match="this TPU VM, which is a v4-8; use --tpu v4-8"):
        compose.select_runtime("v4-32")


def test_the_matching_tpu_type_passes(monkeypatch):
    monkeypatch.setattr(compose.runtime, "on_tpu_vm", lambda: True)
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v4-32")
    assert compose.select_runtime("v4-32").chips == 16
