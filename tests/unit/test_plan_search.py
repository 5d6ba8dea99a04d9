"""`zoo plan --search`'s space and the rules that spare compiles: which meshes each preset
is tried on, what a pinned key holds, what the analytic plan prunes, what one compiled
result rules out, and the batch bisection (the compiles themselves:
tests/e2e/test_plan_search.py)."""

import pytest

from benchmarks.plan.search import Outcome, Scheduler, projected_step_seconds
from benchmarks.plan.search_space import (
    ESTIMATE_FLOOR,
    _factorizations,
    _mesh_splits,
    search_space,
)
from core import topology
from zoo.registry import family


@pytest.fixture(scope="module")
def tiny_space():
    return search_space("llama-tiny", "v5p-8", [], max_batch=16)


def test_factorizations_are_every_ordered_product():
    assert sorted(_factorizations(4, 2)) == [(1, 4), (2, 2), (4, 1)]
    assert all(a * b * c == 64 for a, b, c in _factorizations(64, 3))
    assert len(list(_factorizations(64, 3))) == 28  # C(8, 2): 2^6 into 3 ordered parts


def test_each_preset_splits_the_slice_over_its_own_axes():
    llama, v5p8 = family("llama"), topology.parse("v5p-8")
    assert _mesh_splits(llama, "fsdp", v5p8) == [
        ("mesh.data=1", "mesh.fsdp=4"), ("mesh.data=2", "mesh.fsdp=2"),
        ("mesh.data=4", "mesh.fsdp=1")]
    tensor = _mesh_splits(llama, "fsdp_tensor", v5p8)
    # tensor is at least 2 (at 1 the preset is plain fsdp) and every split tiles 4 chips
    assert tensor and all(any(o.startswith("mesh.tensor=") for o in split) for split in tensor)
    assert ("mesh.data=1", "mesh.fsdp=1", "mesh.tensor=4") in tensor
    context = _mesh_splits(llama, "fsdp_context", v5p8)
    assert all(any(o.startswith("mesh.sequence=") for o in split) for split in context)


def test_tensor_parallelism_stays_within_eight_devices():
    splits = _mesh_splits(family("llama"), "fsdp_tensor", topology.parse("v5p-128"))
    sizes = {int(o.split("=")[1]) for split in splits for o in split
             if o.startswith("mesh.tensor=")}
    assert sizes == {2, 4, 8}


def test_two_slices_split_the_data_center_network_over_data_or_fsdp():
    splits = _mesh_splits(family("llama"), "fsdp", topology.parse("2xv5p-8"))
    dcn = {tuple(o for o in split if o.startswith("mesh.dcn.")) for split in splits}
    assert dcn == {("mesh.dcn.fsdp=2",), ("mesh.dcn.data=2",)}


def test_the_space_is_every_unpinned_key_pruned_by_the_estimate(tiny_space):
    space = tiny_space
    assert space.considered == 9 * 7 * 5  # 3 presets x 3 meshes, 7 remats, batch 1 to 16
    assert not space.invalid and space.unfit == 0  # llama-tiny fits a v5p chip every way
    assert len(space.candidates) == space.considered
    first = space.candidates[0]  # the best estimate: the largest batch, no recompute
    assert first.batch_per_device == 16 and first.remat == "none"
    assert "global_batch_size=64" in first.overrides  # 16 per device x 4 chips


def test_pinned_keys_are_held():
    space = search_space("llama-tiny", "v5p-8", ["remat=scan", "mesh.tensor=2",
                                                  "sharding=fsdp_tensor"], max_batch=4)
    assert {c.remat for c in space.candidates} == {"scan"}
    assert {c.mesh for c in space.candidates} == {
        (("data", 1), ("expert", 1), ("fsdp", 2), ("sequence", 1), ("tensor", 2))}
    assert all(not any(o.startswith(("remat=", "mesh.", "sharding=")) for o in c.overrides)
               for c in space.candidates)


def test_a_model_that_fits_nowhere_leaves_an_empty_space():
    space = search_space("llama-70b", "v4-8", [], max_batch=2)
    assert not space.candidates and space.unfit == space.considered - len(space.invalid)
    assert space.closest_unfit.total > space.closest_unfit.hbm_bytes


def _record(memory_s, compute_s, matmul, once):
    return {"projected_step": {"compute_s": compute_s, "memory_s": memory_s,
                               "communication_s": 0.001, "dcn_s": 0.0},
            "flops_per_chip": {"compiled_matmul": matmul,
                               "compiled_matmul_loop_bodies_once": once,
                               "analytic_model": 1.0}}


def test_a_loop_bodys_memory_counts_every_trip():
    unrolled = projected_step_seconds(_record(0.004, 0.002, 8e12, 8e12))
    scanned = projected_step_seconds(_record(0.001, 0.002, 8e12, 2e12))  # a 4-trip body
    assert unrolled == pytest.approx(0.005) and scanned == pytest.approx(0.005)


FSDP4 = {"data": 1, "fsdp": 4, "sequence": 1, "expert": 1, "tensor": 1}


@pytest.fixture
def scheduler(tiny_space):
    scheduler = Scheduler(tiny_space, jobs=1, deadline=None)
    yield scheduler
    scheduler.bar.close()


def finished(scheduler, status, remat, batch, mesh=None) -> Outcome:
    """The fsdp candidate of this remat, batch (and mesh) compiled with `status`, as the
    scheduler records a finished compile."""
    candidate = next(c for c in scheduler.pending if c.remat == remat
                     and c.batch_per_device == batch
                     and (mesh is None or dict(c.mesh) == mesh) and c.sharding == "fsdp")
    outcome = Outcome(candidate, status, 1.0)
    scheduler.pending.remove(candidate)
    scheduler.outcomes.append(outcome)
    scheduler._drop_ruled_out()
    return outcome


def test_a_fitting_compile_rules_out_less_batch_and_more_recompute(scheduler):
    fits = finished(scheduler, "fits", "none", 16, FSDP4)
    same_layout = [c for c in scheduler.pending if c.group == fits.candidate.group]
    assert same_layout == []  # none at the largest batch beats the rest of its layout
    assert any(c.group != fits.candidate.group for c in scheduler.pending)


def test_once_one_fits_what_is_estimated_far_below_it_is_not_compiled(scheduler):
    best = scheduler.pending[0]
    fits = finished(scheduler, "fits", best.remat, best.batch_per_device, dict(best.mesh))
    floor = ESTIMATE_FLOOR * fits.candidate.items_per_second_per_chip
    assert scheduler.below_floor > 0
    assert all(c.items_per_second_per_chip >= floor for c in scheduler.pending)


def test_a_refused_compile_rules_out_more_batch_and_less_fsdp_and_bisects(scheduler):
    finished(scheduler, "refused", "none", 16, FSDP4)
    left = {(c.remat, c.batch_per_device, dict(c.mesh)["data"]) for c in scheduler.pending
            if c.sharding == "fsdp"}
    assert not {key for key in left if key[0] == "none" and key[1] == 16}  # data=1, 2, 4
    assert ("scan", 16, 1) in left and ("none", 8, 1) in left
    fits = finished(scheduler, "fits", "none", 8, FSDP4)
    scheduler._bisect(fits)  # 8 fits, 16 refused: 12 is tried next
    assert any(c.batch_per_device == 12 and c.remat == "none" and dict(c.mesh) == FSDP4
               for c in scheduler.pending)
