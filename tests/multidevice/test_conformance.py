"""The conformance suite: every registered family and size meets the contract the shared
runtime relies on. A new family is checked here as soon as it has its registry line.

- every size builds on the meta device, with the parameter count of its Hugging Face class;
- every sharding preset matches every parameter (and activation) of every size, strictly,
  and a forgotten rule fails with a message that says what to add;
- every remat preset names layers and stacks the model has;
- the tiny size trains: forward + backward under every sharding preset, equal on 4 XLA CPU
  devices and on 1, with the planned shards (`slow`: test_*_presets.py compare every
  family's shardings on 8 devices by default); a checkpoint saved by a real `zoo train`
  run restores exactly; the export loads in transformers with the same loss;
- the analytic FLOPs (full attention) match torch's FlopCounterMode within 2%.
"""

import dataclasses
import functools
import inspect
import math

import pytest
import torch

from core.mesh import resolve_axis_sizes
from core.remat import apply_remat
from core.sharding import (
    ShardingError,
    ShardingRules,
    match_activations,
    match_gathered,
    plan_params,
)
from tests.support.conformance_worker import mesh_for
from tests.support.xla_harness import assert_same_loss_and_grads, run_workers
from zoo.app.run import resolve_run
from zoo.registry import FAMILIES, family

SIZES = [(name, size) for name in FAMILIES for size in family(name).sizes]
PRESETS = [(name, p) for name in FAMILIES for p in family(name).preset_names("sharding")]
REMATS = [(name, p) for name in FAMILIES for p in family(name).preset_names("remat")]
# fp32; sharding only reorders reductions.
XLA_TOL = {"rtol": 1e-4, "atol": 1e-5}
# The family whose 4-device checkpoint round trip (a 2-step `zoo train`, its restore and
# export) runs by default; the others' are `slow`: their exports and resumes run end to end
# (tests/e2e) by default.
TRAINED_BY_DEFAULT = ("llama",)


def trained(name: str, *rest):
    marks = () if name in TRAINED_BY_DEFAULT else pytest.mark.slow
    return pytest.param(name, *rest, marks=marks)


def sharded_vs_single(name: str, preset: str):
    """Every family's sharding presets are compared on 8 devices against 1 by default
    (test_*_presets.py, every sharding of each family), so the 4-device comparison here, a
    1-device worker and a forward+backward per preset on each count, is `slow` for all."""
    return pytest.param(name, preset, marks=pytest.mark.slow)


@functools.cache
def meta_model(name: str, size: str):
    fam = family(name)
    with torch.device("meta"):
        return fam.build(fam.sizes[size], init=False)


def hf_class(fam):
    import transformers

    return getattr(transformers, fam.hf_class)


@pytest.mark.parametrize("name,size", SIZES)
def test_every_size_builds_on_meta_with_hf_names_and_shapes(name, size):
    """Every parameter is in the HF class with the same shape, and every HF weight is ours
    or one of its tied aliases (e.g. T5's encoder.embed_tokens of `shared`)."""
    fam = family(name)
    ours = {n: tuple(t.shape) for n, t in meta_model(name, size).state_dict().items()}
    assert sum(math.prod(shape) for shape in ours.values()) > 0
    if fam.hf_class:
        with torch.device("meta"):
            hf = hf_class(fam)(fam.hf_config(fam.sizes[size]))
        theirs = {n: tuple(t.shape) for n, t in hf.state_dict().items()}
        assert ours.items() <= theirs.items()
        assert set(theirs) - set(ours) <= set(getattr(hf, "_tied_weights_keys", None) or {})


@pytest.mark.parametrize("name,preset", PRESETS)
def test_sharding_preset_covers_every_size_strictly(name, preset):
    fam = family(name)
    rules = ShardingRules.from_yaml(fam.preset("sharding", preset))
    axes = resolve_axis_sizes(mesh_for(rules, devices=8), 8)
    for size in fam.sizes:
        model = meta_model(name, size)
        plan = plan_params(model, rules, axes)
        assert {p.name for p in plan} == {n for n, _ in model.named_parameters()}
        match_activations(model, rules)
        match_gathered(model, rules)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_forgotten_sharding_rule_says_what_to_add(name):
    fam = family(name)
    rules = ShardingRules.from_yaml(fam.preset("sharding", "fsdp"))
    forgotten = next(r for r in rules.params if not r.optional)
    dropped = dataclasses.replace(rules, params=tuple(r for r in rules.params if r != forgotten))
    with pytest.raises(ShardingError, match="no sharding rule covers param .*: add a pattern"):
        plan_params(meta_model(name, "tiny"), dropped, {"fsdp": 8})


@pytest.mark.parametrize("name,remat", REMATS)
def test_remat_preset_names_real_layers(name, remat):
    fam = family(name)
    # raises on names the model does not have
    apply_remat(fam.build(fam.sizes["tiny"], init=False), fam.remat(remat))


@pytest.fixture(scope="module")
def worker_runs(request, tmp_path_factory):
    """name -> worker results by device count, plus the folder of the 4-device run; each
    family's workers run once, when a selected test first needs them, and the presets'
    forward+backward (with the 1-device worker) only when a selected test compares them."""
    cache = {}
    compared = {item.callspec.params["name"] for item in request.session.items
                if item.originalname == "test_tiny_trains_equally_on_4_devices_and_1"}

    def runs(name: str) -> dict:
        if name not in cache:
            out = tmp_path_factory.mktemp(f"conformance-{name}")
            presets = name in compared
            results = run_workers("tests.support.conformance_worker",
                                  (1, 4) if presets else (4,), out,
                                  args=[*(["--presets"] if presets else []), name])
            cache[name] = {**results, "dir": out / f"run-{name}"}
        return cache[name]

    return runs


@pytest.mark.parametrize("name,preset", [sharded_vs_single(*case) for case in PRESETS])
def test_tiny_trains_equally_on_4_devices_and_1(worker_runs, name, preset):
    runs = worker_runs(name)
    single, sharded = runs[1]["presets"][name][preset], runs[4]["presets"][name][preset]
    assert torch.isfinite(single["loss"])
    assert any(g.abs().sum() > 0 for g in single["grads"].values())
    assert_same_loss_and_grads(sharded, single, XLA_TOL)
    assert sharded["actual_shards"] == {n: {s} for n, s in sharded["planned_shards"].items()}


@pytest.mark.parametrize("name", [trained(name) for name in FAMILIES])
def test_checkpoint_restores_exactly(worker_runs, name):
    result = worker_runs(name)[4]["checkpoints"][name]
    assert result["summary"]["last_step"] == 2
    saved, restored = result["saved"], result["restored"]
    assert restored["step"] == saved["step"] == 2
    for part in ("model", "optimizer"):
        assert saved[part].keys() == restored[part].keys() and saved[part]
        for key, value in saved[part].items():
            assert torch.equal(restored[part][key], value), f"{part} {key}"


def loss_on_example(name: str, forward) -> torch.Tensor:
    fam = family(name)
    run = resolve_run(f"{name}-tiny", []).config
    return forward(fam.task.example_batch(run, seed=0))


@pytest.mark.parametrize("name", [trained(n) for n in FAMILIES if family(n).hf_class])
def test_export_loads_in_transformers_with_the_same_loss(worker_runs, name, tmp_path):
    from core.store.checkpoint_reader import load_checkpoint
    from eval.export import export

    fam = family(name)
    run_dir = worker_runs(name)["dir"]
    out = export(run_dir, tmp_path / "hf").folder
    theirs = hf_class(fam).from_pretrained(out).eval()
    ours = fam.build(fam.sizes["tiny"], init=False).eval()  # eval: a MoE drops no token
    ours.load_state_dict(load_checkpoint(run_dir), strict=True)
    accepted = inspect.signature(theirs.forward).parameters
    # a mixture of experts' training loss includes the router's load-balancing term
    extra = {"output_router_logits": True} if "output_router_logits" in accepted else {}

    def hf_loss(batch):
        return theirs(**{k: v for k, v in batch.items() if k in accepted}, **extra).loss

    with torch.no_grad():
        expected = loss_on_example(name, lambda b: fam.task.loss(ours, b)[0])
        torch.testing.assert_close(loss_on_example(name, hf_loss), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", FAMILIES)
def test_analytic_flops_match_flop_counter(name):
    """FlopCounterMode counts every matmul/conv the forward runs, attention in full; the
    analytic count with causal=False counts the same, so they must agree within 2%."""
    from torch.utils.flop_counter import FlopCounterMode

    fam = family(name)
    run = resolve_run(f"{name}-tiny", []).config
    model = fam.build(run.model, seed=0)
    batch = fam.task.example_batch(run, seed=0)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fam.task.loss(model, batch)
    analytic = fam.forward_flops(run, causal=False) * fam.task.items_per_step(run)
    counted = counter.get_total_flops() - routing_flops(model, counter.get_flop_counts())
    assert analytic == pytest.approx(counted, rel=0.02)


def routing_flops(model, counts: dict) -> int:
    """FLOPs of matmuls that only move tokens, not model FLOPs: the one-hot dispatch and
    combine of a mixture of experts (the own ops of modules with `routes_by_matmul`, outside
    their children: the router and the experts are model FLOPs)."""
    # keys are "<outermost module called>.<path below it>": match paths by suffix
    below_root = {key.split(".", 1)[1]: sum(ops.values()) for key, ops in counts.items()
                  if "." in key}

    def flops(name: str) -> int:
        return next((total for path, total in below_root.items()
                     if name == path or name.endswith(f".{path}")), 0)

    return sum(flops(name) - sum(flops(f"{name}.{child}") for child, _ in module.named_children())
               for name, module in model.named_modules()
               if getattr(module, "routes_by_matmul", False))
