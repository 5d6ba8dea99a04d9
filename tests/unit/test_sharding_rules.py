"""Rule matching and the per-parameter plan: pure bookkeeping, checked on the host."""

import pytest

from core.sharding import (
    ShardingError,
    ShardingRules,
    format_plan,
    gathered_spec,
    match_activations,
    match_gathered,
    plan_params,
)
from tests.support.toy_model import ToyModel

MESH = {"data": 1, "fsdp": 4, "sequence": 1, "expert": 1, "tensor": 2}


def rules(params, activations=None):
    return ShardingRules.from_dict({"params": params, "activations": activations})


FULL = {
    "embed.weight": ["fsdp", None],
    "pos.weight": [None, "tensor"],
    "layers.*.up.weight": ["tensor", "fsdp"],
    "layers.*.down.weight": ["fsdp", "tensor"],
    "layers.**": [None],
    "head.weight": [["fsdp", "tensor"], None],
}


def test_plan_gives_each_parameter_its_rule_and_shard_shape():
    plan = {p.name: p for p in plan_params(ToyModel(), rules(FULL), MESH)}
    assert plan["layers.1.up.weight"].rule == "layers.*.up.weight"
    assert plan["layers.1.up.weight"].shape == (128, 64)
    assert plan["layers.1.up.weight"].shard_shape == (64, 16)
    assert plan["layers.1.up.weight"].shard_bytes == 64 * 16 * 4
    assert plan["layers.2.norm.bias"].rule == "layers.**"
    assert plan["head.weight"].shard_shape == (32, 64)  # 256 rows over fsdp x tensor = 8


def test_uneven_dimensions_are_padded_like_xla():
    model = ToyModel()
    plan = plan_params(
        model, rules({**FULL, "pos.weight": [None, "tensor"]}), {**MESH, "tensor": 3}
    )
    assert {p.name: p for p in plan}["pos.weight"].shard_shape == (16, 22)  # ceil(64/3)


def test_a_parameter_without_a_rule_is_named():
    incomplete = {k: v for k, v in FULL.items() if k != "pos.weight"}
    with pytest.raises(ShardingError, match="no sharding rule covers param 'pos.weight'"):
        plan_params(ToyModel(), rules(incomplete), MESH)


def test_a_rule_that_matches_nothing_is_named():
    with pytest.raises(ShardingError, match="rule 'layers.*.attn.weight' matches no param"):
        plan_params(ToyModel(), rules({**FULL, "layers.*.attn.weight": [None, None]}), MESH)


def test_a_shadowed_rule_counts_as_matching_nothing():
    shadowing = {"layers.**": [None, None], **FULL}
    with pytest.raises(ShardingError, match="rule 'layers.*.up.weight' matches no param"):
        plan_params(ToyModel(), rules(shadowing), MESH)


@pytest.mark.parametrize(
    "spec,message",
    [
        (["fsdp"], "spec ['fsdp'] has 1 dims but the tensor has shape [256, 64]"),
        (["model", None], "unknown mesh axis 'model'"),
        (["fsdp", "fsdp"], "mesh axis 'fsdp' is used twice"),
    ],
)
def test_specs_are_checked_against_shape_and_mesh(spec, message):
    with pytest.raises(ShardingError) as error:
        plan_params(ToyModel(), rules({**FULL, "embed.weight": spec}), MESH)
    assert message in str(error.value)


def test_gathered_points_are_a_section_of_their_own_and_strict():
    """A gathered weight is pinned in forward only (core/backends/xla/spmd.py)."""
    parsed = ShardingRules.from_dict({"params": FULL, "gathered": {"layers.*.up": [None]}})
    assert [r.pattern for r in parsed.gathered] == ["layers.*.up"] and not parsed.activations
    assert set(match_gathered(ToyModel(), parsed)) == {f"layers.{i}.up" for i in range(3)}
    missing = ShardingRules.from_dict({"params": FULL, "gathered": {"encoder.*": [None]}})
    with pytest.raises(ShardingError, match="gathered rule 'encoder.*' matches no module"):
        match_gathered(ToyModel(), missing)


def test_activation_rules_are_strict_too():
    model = ToyModel()
    assert set(match_activations(model, rules(FULL, {"layers.*": [None, None, None]}))) == {
        "layers.0",
        "layers.1",
        "layers.2",
    }
    with pytest.raises(ShardingError, match="activation rule 'encoder.*' matches no module"):
        match_activations(model, rules(FULL, {"encoder.*": [None]}))


@pytest.mark.parametrize(
    "data,message",
    [
        ({"params": {"embed.weight": "fsdp"}}, "spec must be a list"),
        ({"params": {"embed.weight": [3, None]}}, "bad dimension 3"),
        ({"parameters": {}}, "unknown section(s) ['parameters']"),
    ],
)
def test_malformed_rule_files(data, message):
    with pytest.raises(ShardingError) as error:
        ShardingRules.from_dict(data)
    assert message in str(error.value)


def test_logical_batch_axis_is_the_inputs_batch_axes():
    from core.inputs import batch_spec

    parsed = rules(FULL, {"layers.*": ["batch", None], "layers.*.up": ["batch_beside_experts"]})
    assert parsed.activations[0].spec == (("data", "fsdp", "expert"), None)
    assert parsed.activations[0].spec[0] == batch_spec((8, 16), MESH)[0]
    assert parsed.activations[1].spec == (("data", "fsdp"),)


def test_format_plan_lists_every_parameter_and_the_total():
    text = format_plan(plan_params(ToyModel(), rules(FULL), MESH))
    assert "layers.0.up.weight" in text and "[tensor, fsdp]" in text and "64x16" in text
    assert text.splitlines()[-1].startswith("total per device:")


def test_a_gathered_spec_drops_fsdps_axes_and_keeps_the_others():
    """The sampler's weights (core/backends/xla/sampler_weights.py): whole over data and
    fsdp, still split over tensor and expert."""
    assert gathered_spec(("fsdp", "tensor")) == (None, "tensor")
    assert gathered_spec((("data", "fsdp"), None)) == (None, None)
    assert gathered_spec((("fsdp", "tensor"), "expert")) == ("tensor", "expert")
    assert gathered_spec(("expert", ("fsdp", "data"), "tensor")) == ("expert", None, "tensor")
    assert gathered_spec((None,)) == (None,)
