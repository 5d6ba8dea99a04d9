"""The preset tests every family shares (tests/multidevice/test_llama_presets.py,
test_t5_presets.py, test_vit_presets.py): parity with transformers for each of the cases'
PARITY_CONFIGS on eager CPU and on 1 XLA CPU device (by default the first config, unrolled;
scanned too where no default preset scans; every config and remat in the slow set), and
every sharding x remat preset of the cases' CONFIG on 8 devices against 1. A family
subclasses `FamilyPresetTests`, names its cases module (see preset_worker.py) and
tolerances, and implements `hf_reference(config)`: transformers' loss, logits and gradients
for the weights `FAMILY.build(config, seed=0)` and the cases' batch (a causal LM subclasses
`CausalLMPresetTests`, which has it)."""

import json

import pytest
import torch
import transformers

from core.remat import apply_remat
from tests.support.preset_worker import BASELINE, PARITY_REMATS
from tests.support.xla_harness import assert_same_loss_and_grads, run_workers

# fp32: XLA:CPU fuses and reorders more than eager CPU, which runs transformers' kernels.
XLA_TOL = {"rtol": 1e-4, "atol": 1e-5}


class FamilyPresetTests:
    cases = None  # the family's cases module
    eager_tol: dict = {}
    # remat presets whose HLO holds an optimization barrier (torch_xla's checkpoint); scan
    # rematerialises by its partition (remat policy) instead
    barrier_remats = ("checkpoint",)

    @staticmethod
    def hf_reference(config) -> dict:
        """{"loss", "logits", "grads"} of transformers' model with our weights for `config`."""
        raise NotImplementedError

    def pytest_generate_tests(self, metafunc):
        names = set(metafunc.fixturenames)
        if {"parity", "xla_remat"} <= names:
            # by default the first config on XLA (every config is compared on eager CPU, and
            # the XLA graph of each is the same torch code): unrolled, and scanned only where
            # no default preset scans on 8 devices (each of those equals the unrolled
            # 1-device run, which equals transformers)
            first = next(iter(self.cases.PARITY_CONFIGS))
            scans_on_8 = any(r.startswith("scan") for _, r in default_presets(self.cases))
            metafunc.parametrize("parity,xla_remat", [
                _default_or_slow((name, remat),
                                 name == first and (remat == "none" or not scans_on_8))
                for name in self.cases.PARITY_CONFIGS for remat in PARITY_REMATS])
        elif "parity" in names:
            metafunc.parametrize("parity", list(self.cases.PARITY_CONFIGS))
        if {"preset", "remat"} <= names:
            default = default_presets(self.cases)
            metafunc.parametrize("preset,remat", [
                _default_or_slow((p, r), (p, r) in default)
                for p in self.cases.MESHES for r in self.cases.REMATS])

    @pytest.fixture(scope="class")
    @classmethod
    def xla_runs(cls, request, tmp_path_factory):
        """{devices: {"parity": ..., "presets": ...}}: this family's share of every family's
        runs (all_families_runs)."""
        runs = all_families_runs(request.session, tmp_path_factory)
        return {n: runs[n]["families"][cls.cases.__name__] for n in runs}

    @pytest.fixture(scope="class")
    @classmethod
    def references(cls):
        """parity config name -> transformers' reference, each computed when first needed."""
        return {}

    @pytest.fixture
    def reference(self, references, parity):
        if parity not in references:
            references[parity] = self.hf_reference(self.cases.PARITY_CONFIGS[parity])
        return references[parity]

    @pytest.mark.parametrize("eager_remat", ["none", "checkpoint"])  # scan needs XLA devices
    def test_eager_cpu_matches_transformers(self, reference, parity, eager_remat):
        cases = self.cases
        model = cases.FAMILY.build(cases.PARITY_CONFIGS[parity], seed=0)
        apply_remat(model, cases.FAMILY.remat(eager_remat))
        loss, logits = cases.forward(model, cases.batch())
        loss.backward()
        torch.testing.assert_close(logits, reference["logits"], **self.eager_tol)
        grads = {n: p.grad for n, p in model.named_parameters()}
        assert_same_loss_and_grads({"loss": loss.detach(), "grads": grads}, reference,
                                   self.eager_tol)

    def test_xla_cpu_matches_transformers(self, xla_runs, reference, parity, xla_remat):
        result = xla_runs[1]["parity"][(parity, xla_remat)]
        torch.testing.assert_close(result["logits"], reference["logits"], **XLA_TOL)
        assert_same_loss_and_grads(result, reference, XLA_TOL)
        assert result["hlo_has_scan"] == (xla_remat == "scan")

    def test_presets_on_8_devices_match_1_device(self, xla_runs, preset, remat):
        reference = xla_runs[1]["presets"][BASELINE]
        result = xla_runs[8]["presets"][(preset, remat)]
        assert_same_loss_and_grads(result, reference, XLA_TOL)
        for name, planned in result["planned_shards"].items():
            assert result["actual_shards"][name] == {planned}, name
        assert result["hlo_has_scan"] == remat.startswith("scan")
        assert result["hlo_has_remat"] == (remat in self.barrier_remats)
        assert not result["hlo_has_element_scatter"]


class CausalLMPresetTests(FamilyPresetTests):
    """A causal LM family's reference: transformers' class the family exports as
    (`hf_class`) holding our weights, its config changed by `hf_settings` (a mixture of
    experts returns its router logits, for the balancing term in the loss)."""

    hf_settings: dict = {}

    @classmethod
    def hf_model(cls, config):
        family = cls.cases.FAMILY
        ours = family.build(config, seed=0)
        hf_config = family.hf_config(config)
        for name, value in cls.hf_settings.items():
            setattr(hf_config, name, value)
        hf = getattr(transformers, family.hf_class)(hf_config).eval()
        hf.load_state_dict(ours.state_dict(), strict=not config.tie_word_embeddings)
        return hf

    def test_hf_checkpoint_directory_loads(self, tmp_path):
        """transformers' `save_pretrained` folder reads as the cases' config (what
        transformers' config holds of it) and loads with transformers' logits."""
        family, expected = self.cases.FAMILY, self.cases.CONFIG
        hf = self.hf_model(expected)
        hf.save_pretrained(tmp_path)
        config = family.config_from_hf(str(tmp_path))
        assert family.hf_config(config).to_dict() == family.hf_config(expected).to_dict()
        model = family.build(config, init=False).eval()
        family.load_hf(model, str(tmp_path))
        ids = self.cases.batch()["input_ids"]
        with torch.no_grad():
            torch.testing.assert_close(model(ids), hf(input_ids=ids).logits, **self.eager_tol)

    @classmethod
    def hf_reference(cls, config) -> dict:
        hf = cls.hf_model(config)
        b = cls.cases.batch()
        out = hf(input_ids=b["input_ids"], labels=b["labels"])
        out.loss.backward()
        grads = {n: p.grad for n, p in hf.named_parameters()}
        return {"loss": out.loss.detach(), "logits": out.logits.detach(), "grads": grads}


def default_presets(cases) -> list[tuple[str, str]]:
    """The sharding x remat presets of the default suite (the rest are `slow`): every remat
    under the first sharding; each other sharding unrolled with a remat barrier, its layout
    per layer. Scanned under those shardings: the toy model's at 4 and 8 devices
    (test_spmd.py) and llama's and mixtral's compiled for a TPU (test_tpu_compile.py). A
    family built from another's layers names fewer (`DEFAULT_PRESETS`: qwen3's)."""
    if hasattr(cases, "DEFAULT_PRESETS"):
        return cases.DEFAULT_PRESETS
    first, *others = cases.MESHES
    return [(first, remat) for remat in cases.REMATS] + [(mesh, "checkpoint") for mesh in others]


def _default_or_slow(values: tuple, default: bool):
    return pytest.param(*values, marks=() if default else pytest.mark.slow)


ALL_RUNS = pytest.StashKey[dict]()


def all_families_runs(session, tmp_path_factory) -> dict:
    """The workers' results for the parity and preset cases this session selected, of every
    family's preset tests at once (tests/support/preset_worker.py): made by the first
    family's tests that asks, kept for the others (the test files share one xdist worker:
    tests/conftest.py)."""
    if ALL_RUNS not in session.stash:
        selected: dict = {}
        for item in session.items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if not (item.cls and issubclass(item.cls, FamilyPresetTests)):
                continue
            mine = selected.setdefault(item.cls.cases.__name__, {"parity": set(), "presets": set()})
            if "xla_remat" in params:
                mine["parity"].add((params["parity"], params["xla_remat"]))
            if "preset" in params:
                mine["presets"].add((params["preset"], params["remat"]))
        selected = {module: {k: sorted(v) for k, v in kinds.items()}
                    for module, kinds in selected.items()}
        session.stash[ALL_RUNS] = run_workers(
            "tests.support.preset_worker", (1, 8), tmp_path_factory.mktemp("presets"),
            timeout=2400, args=[json.dumps(selected)])
    return session.stash[ALL_RUNS]
