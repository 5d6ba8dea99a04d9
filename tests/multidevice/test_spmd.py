"""Sharding equivalence on 1 and 8 XLA CPU devices.

The PJRT device count is fixed per process, so tests/support/spmd_worker.py runs once per
count (in parallel) and every preset x remat combination is compared here. (4 devices
against 1: every family's presets in the conformance suite.)
"""

import pytest
import torch

from tests.support.spmd_worker import PRESETS, REMATS
from tests.support.xla_harness import assert_same_loss_and_grads, run_workers

DEVICE_COUNTS = (1, 8)
COMBOS = [(p, r) for p in PRESETS for r in REMATS]
# fp32 on the XLA CPU backend; sharded reductions reorder sums, nothing else differs.
TOL = {"rtol": 1e-5, "atol": 1e-6}


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    return run_workers("tests.support.spmd_worker", DEVICE_COUNTS, tmp_path_factory.mktemp("spmd"))


@pytest.mark.parametrize("devices", DEVICE_COUNTS)
def test_worker_saw_its_device_count(runs, devices):
    assert runs[devices]["devices"] == devices


@pytest.mark.parametrize("preset,remat", COMBOS)
def test_sharded_loss_and_grads_match_one_device(runs, preset, remat):
    reference = runs[1]["results"][("fsdp", "none")]
    assert_same_loss_and_grads(runs[8]["results"][(preset, remat)], reference, TOL)


@pytest.mark.parametrize("remat", [r for r in REMATS if r != "none"])
def test_remat_and_scan_match_plain_loop_on_one_device(runs, remat):
    reference = runs[1]["results"][("fsdp", "none")]
    assert_same_loss_and_grads(runs[1]["results"][("fsdp", remat)], reference, TOL)


@pytest.mark.parametrize("preset,remat", COMBOS)
def test_remat_presets_really_change_the_graph(runs, preset, remat):
    result = runs[8]["results"][(preset, remat)]
    assert result["hlo_has_scan"] == remat.startswith("scan")
    # Outside scan, checkpointing fences its recompute with an optimization barrier.
    if remat == "checkpoint":
        assert result["hlo_has_remat"]
    if remat == "none":
        assert not result["hlo_has_remat"]


@pytest.mark.parametrize("preset", PRESETS)
def test_each_parameter_carries_the_sharding_its_rule_asked_for(runs, preset):
    result = runs[8]["results"][(preset, "none")]
    for name, planned in result["planned_shards"].items():
        assert result["actual_shards"][name] == {planned}, name


def test_sharding_specs_on_8_devices_are_the_expected_layouts(runs):
    fsdp = runs[8]["results"][("fsdp", "none")]["specs"]
    assert fsdp["embed.weight"] == "{devices=[8,1]0,1,2,3,4,5,6,7}"
    assert fsdp["layers.0.norm.weight"] == "{replicated}"
    tensor = runs[8]["results"][("fsdp_tensor", "none")]["specs"]
    # mesh fsdp=4 x tensor=2: up.weight [tensor, fsdp] puts tensor on rows.
    assert tensor["layers.0.up.weight"] == "{devices=[2,4]0,2,4,6,1,3,5,7}"
    assert tensor["layers.0.up.bias"].endswith("last_tile_dim_replicate}")


@pytest.mark.parametrize("devices", DEVICE_COUNTS)
def test_device_loader_delivers_batch_sharded_inputs(runs, devices):
    batches = runs[devices]["loader"]
    torch.testing.assert_close(
        torch.cat([b["input_ids"][0] for b in batches]), runs[devices]["host_ids"]
    )
    for b in batches:
        if devices == 1:
            assert b["input_ids"][1] == b["mask"][1] == "{replicated}"
        else:
            assert b["input_ids"][1].startswith(f"{{devices=[{devices},1]")
            assert b["mask"][1].startswith(f"{{devices=[{devices},1,1]")
