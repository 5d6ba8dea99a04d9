"""`zoo new-model`: the template becomes a family that passes the conformance suite as is,
and the suite tells a contributor which sharding rule they forgot."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import UserError
from tests.support.paths import ROOT
from zoo.app import scaffold

CONFORMANCE = ROOT / "tests" / "multidevice" / "test_conformance.py"


def conformance(ext: Path, name: str, selection: str):
    env = {**os.environ, "ZOO_FAMILIES": f"{name}={name}.family", "PYTHONPATH": str(ext),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         str(CONFORMANCE), "-k", selection],
        env=env, capture_output=True, text=True, timeout=900, cwd=ROOT,
    )


def test_scaffolded_family_passes_the_conformance_suite(tmp_path):
    scaffold.scaffold("demo_net", tmp_path)
    family_py = (tmp_path / "demo_net" / "family.py").read_text()
    assert 'name="demo_net"' in family_py and "DemoNetForCausalLM" in family_py
    result = conformance(tmp_path, "demo_net", "demo_net")
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


def test_a_forgotten_sharding_rule_fails_with_what_to_add(tmp_path):
    scaffold.scaffold("demo_net", tmp_path)
    rules = tmp_path / "demo_net" / "sharding" / "fsdp.yaml"
    rules.write_text(rules.read_text().replace("  lm_head.weight: [fsdp, null]\n", ""))
    result = conformance(tmp_path, "demo_net", "demo_net and covers_every_size")
    assert result.returncode == 1
    assert "no sharding rule covers param 'lm_head.weight': add a pattern" in result.stdout


def test_families_in_the_zoo_folder_are_found_without_a_registry_line():
    from zoo.registry import _in_tree_families

    found = _in_tree_families()
    assert {"llama", "t5", "vit"} <= set(found) and found["t5"] == "zoo.t5.family"
    assert "_template" not in found and "tasks" not in found


def test_an_installed_package_registers_its_family_by_entry_point(tmp_path):
    scaffold.scaffold("demo_net", tmp_path)
    info = tmp_path / "demo_net_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-net-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[zoo.families]\ndemo_net = demo_net.family\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "ZOO_FAMILIES": ""}
    code = "from zoo.registry import resolve; print(resolve('demo_net-tiny')[0].name)"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.stdout.strip() == "demo_net", result.stderr[-2000:]


@pytest.mark.parametrize("name", ["Demo", "demo-net", "llama", "9lives"])
def test_bad_names_are_refused(name, tmp_path):
    with pytest.raises(UserError):
        scaffold.scaffold(name, tmp_path)
