"""The preset tests every non-LM family shares (test_t5.py, test_vit.py): parity with
transformers on eager CPU and on 1 XLA CPU device (scan off and on), and every sharding x
remat preset on 8 devices against 1. A family subclasses `FamilyPresetTests`, names its
cases module (see preset_worker.py) and tolerances, and provides a module-level `reference`
fixture: transformers' loss, logits and gradients for the cases' weights and batch."""

from pathlib import Path

import pytest
import torch
from preset_worker import remat_preset
from xla_harness import assert_same_loss_and_grads, run_workers

from zoo.core.remat import apply_remat

HERE = Path(__file__).resolve().parent
# fp32: XLA:CPU fuses and reorders more than eager CPU, which runs transformers' kernels.
XLA_TOL = {"rtol": 1e-4, "atol": 1e-5}


class FamilyPresetTests:
    cases = None  # the family's cases module
    eager_tol: dict = {}
    # remat presets whose HLO holds an optimization barrier (torch_xla's checkpoint); scan
    # rematerialises by min-cut instead
    barrier_remats = ("checkpoint",)

    def pytest_generate_tests(self, metafunc):
        if {"preset", "remat"} <= set(metafunc.fixturenames):
            combos = [(p, r) for p in self.cases.MESHES for r in self.cases.REMATS]
            metafunc.parametrize("preset,remat", combos)

    @pytest.fixture(scope="class")
    @classmethod
    def xla_runs(cls, tmp_path_factory):
        return run_workers(HERE / "preset_worker.py", (1, 8),
                           tmp_path_factory.mktemp(cls.cases.__name__),
                           args=[cls.cases.__name__])

    @pytest.mark.parametrize("eager_remat", ["none", "checkpoint"])  # scan needs XLA devices
    def test_eager_cpu_matches_transformers(self, reference, eager_remat):
        cases = self.cases
        model = cases.FAMILY.build(cases.CONFIG, seed=0)
        apply_remat(model, remat_preset(cases.FAMILY, eager_remat))
        loss, logits = cases.forward(model, cases.batch())
        loss.backward()
        torch.testing.assert_close(logits, reference["logits"], **self.eager_tol)
        grads = {n: p.grad for n, p in model.named_parameters()}
        assert_same_loss_and_grads({"loss": loss.detach(), "grads": grads}, reference,
                                   self.eager_tol)

    @pytest.mark.parametrize("xla_remat", ["none", "scan"])
    def test_xla_cpu_matches_transformers(self, xla_runs, reference, xla_remat):
        result = xla_runs[1]["results"][("fsdp", xla_remat)]
        torch.testing.assert_close(result["logits"], reference["logits"], **XLA_TOL)
        assert_same_loss_and_grads(result, reference, XLA_TOL)
        assert result["hlo_has_scan"] == (xla_remat == "scan")

    def test_presets_on_8_devices_match_1_device(self, xla_runs, preset, remat):
        reference = xla_runs[1]["results"][("fsdp", "none")]
        result = xla_runs[8]["results"][(preset, remat)]
        assert_same_loss_and_grads(result, reference, XLA_TOL)
        for name, planned in result["planned_shards"].items():
            assert result["actual_shards"][name] == {planned}, name
        assert result["hlo_has_scan"] == remat.startswith("scan")
        assert result["hlo_has_remat"] == (remat in self.barrier_remats)
