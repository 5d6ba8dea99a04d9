"""Presets written once (zoo/common/presets), filled and picked by what a family declares:
each family offers the preset names it offered when every family held its own copies, each
remat preset loads as that copy did, and each sharding preset places every parameter,
activation and gathered weight of the tiny size (its layers unrolled and scanned) as that
copy did. The copies' results are recorded in tests/support/data/presets_before_sharing.json
(by these functions, before the copies were deleted)."""

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from core.errors import UserError
from core.remat import RematConfig, RematError, apply_remat
from core.sharding import ShardingRules, match, match_activations, match_gathered
from zoo import registry
from zoo.registry import FAMILIES, family

RECORDED = json.loads(
    (Path(__file__).parents[1] / "support" / "data" / "presets_before_sharing.json").read_text())
REMATS = [(name, remat) for name in RECORDED["remat"] for remat in RECORDED["remat"][name]]
SHARDINGS = [(name, preset) for name in RECORDED["sharding"]
             for preset in RECORDED["sharding"][name]]


def per_layer_kind(chosen: dict) -> dict:
    """name -> spec of the chosen rules, layer indices written N: one entry per kind of
    weight or module (the specs of a kind's names, listed, where they differ)."""
    specs: dict[str, list] = {}
    for name, rule in chosen.items():
        spec = json.loads(json.dumps(rule.spec))
        alike = specs.setdefault(re.sub(r"(?<=\.)\d+(?=\.|$)", "N", name), [])
        if spec not in alike:
            alike.append(spec)
    return {name: alike[0] if len(alike) == 1 else alike for name, alike in sorted(specs.items())}


def placements(fam, rules: ShardingRules, stacks: list[str]) -> dict:
    """Where `rules` put each parameter, activation and gathered weight of the tiny size,
    its layers unrolled and with `stacks` scanned (weights stacked: other names)."""
    result = {}
    for label, scanned in (("unrolled", []), ("scanned", stacks)):
        with torch.device("meta"):
            model = fam.build(fam.sizes["tiny"], init=False)
        apply_remat(model, RematConfig(scan=list(scanned)))
        params = [name for name, _ in model.named_parameters()]
        result[label] = {
            "params": per_layer_kind(match(params, rules.params, "param")),
            "activations": per_layer_kind(match_activations(model, rules)),
            "gathered": per_layer_kind(match_gathered(model, rules)),
        }
    return result


def test_every_family_is_recorded():
    assert set(RECORDED["remat"]) == set(RECORDED["sharding"]) == set(FAMILIES)


@pytest.mark.parametrize("name", RECORDED["remat"])
def test_a_family_offers_the_preset_names_it_offered(name):
    fam = family(name)
    assert fam.preset_names("remat") == sorted(RECORDED["remat"][name])
    assert fam.preset_names("sharding") == sorted(RECORDED["sharding"][name])


@pytest.mark.parametrize("name,remat", REMATS)
def test_a_remat_preset_loads_as_the_family_copy_did(name, remat):
    assert dataclasses.asdict(family(name).remat(remat)) == RECORDED["remat"][name][remat]


@pytest.mark.parametrize("name,preset", SHARDINGS)
def test_a_sharding_preset_places_everything_as_the_family_copy_did(name, preset):
    fam = family(name)
    rules = ShardingRules.from_yaml(fam.preset("sharding", preset))
    stacks = RECORDED["remat"][name]["scan"]["scan"]
    assert placements(fam, rules, stacks) == RECORDED["sharding"][name][preset]


def test_an_unknown_preset_lists_the_valid_names():
    with pytest.raises(UserError, match="mixtral has no remat preset 'scan_offload'; presets: "
                                        "checkpoint, none, scan, scan_checkpoint, scan_minimal$"):
        family("mixtral").preset("remat", "scan_offload")


def test_a_new_remat_policy_is_one_file_every_family_gets(tmp_path, monkeypatch):
    shared = shutil.copytree(registry.SHARED_PRESETS, tmp_path / "presets")
    (shared / "remat" / "scan_everything.yaml").write_text(
        "checkpoint: [$layers]\nscan: [$stacks]\npolicy: full\n")
    monkeypatch.setattr(registry, "SHARED_PRESETS", shared)
    for name in FAMILIES:
        fam = family(name)
        assert "scan_everything" in fam.preset_names("remat"), name
        preset = fam.remat("scan_everything")
        assert preset.checkpoint == list(fam.layer_classes), name
        assert preset.scan == list(fam.layer_stacks), name


def test_a_family_own_preset_comes_before_the_shared_one(tmp_path):
    (tmp_path / "remat").mkdir()
    (tmp_path / "remat" / "scan.yaml").write_text("scan: [model.layers]\n")
    fam = dataclasses.replace(family("llama"), presets_dir=tmp_path)
    assert fam.preset("remat", "scan") == tmp_path / "remat" / "scan.yaml"
    assert fam.preset_names("remat") == family("llama").preset_names("remat")


def test_opting_out_of_a_preset_that_is_not_shared_is_refused():
    fam = dataclasses.replace(family("llama"), without_presets=("remat/scan_everything",))
    with pytest.raises(UserError, match="without_presets names 'remat/scan_everything'"):
        fam.preset_names("remat")


def test_a_placeholder_the_family_does_not_declare_is_refused():
    with pytest.raises(RematError, match=r"\$stacks"):
        RematConfig(checkpoint=["$layers"], scan=["$stacks"]).filled(("Block",), ())
