"""What an install of zoo puts on a machine: the wheel's top-level packages are the design
card's five folders and nothing else (no results, no tests), none of them is already taken by
another installed distribution or the standard library, and the editable install points at
this checkout by a static path, with no import hook that path-based tools cannot follow."""

import ast
import builtins
import importlib.metadata
import importlib.util
import subprocess
import sys
import zipfile

from tests.support.paths import ROOT

TOP_LEVEL = {"core", "zoo", "benchmarks", "eval", "tools"}


def test_the_wheel_installs_the_five_packages_and_no_results_or_tests(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "--null", "-T", "-", "-cf", tmp_path / "src.tar"], cwd=ROOT,
                   input=tracked, check=True)
    subprocess.run(["tar", "-xf", tmp_path / "src.tar", "-C", source], check=True)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", tmp_path / "wheel", source], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "wheel").glob("zoo-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == TOP_LEVEL
    assert not [n for n in names if n.startswith(("benchmarks/results/", "tests/"))]
    assert "zoo/common/presets/remat/scan.yaml" in names  # data folders ship with their code
    assert "zoo/t5/sharding/fsdp.yaml" in names
    assert "core/assets/tokenizer/tokenizer.json" in names


def test_no_top_level_name_is_taken_elsewhere():
    owners = importlib.metadata.packages_distributions()
    for name in TOP_LEVEL:
        assert name not in sys.stdlib_module_names, name
        assert set(owners.get(name, [])) <= {"zoo"}, (name, owners[name])
        origin = importlib.util.find_spec(name).submodule_search_locations[0]
        assert origin == str(ROOT / name), (name, origin)


def test_no_module_binds_a_builtin_by_importing_a_package():
    """`import eval` (or `import eval.export`) would hide the builtin eval in that module:
    the project imports `from eval.x import y` only."""
    binding = sorted(
        f"{path.relative_to(ROOT)}: import {alias.name}"
        for folder in (*TOP_LEVEL, "tests") for path in (ROOT / folder).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Import)
        for alias in node.names
        if alias.asname is None and hasattr(builtins, alias.name.split(".")[0]))
    assert not binding, binding


def test_the_editable_install_is_a_static_path_without_a_finder_hook():
    files = [str(f) for f in importlib.metadata.distribution("zoo").files or ()]
    assert not [f for f in files if "finder" in f], files
    pth = [f for f in files if f.endswith(".pth")]
    if pth:  # an editable install: its .pth names this checkout
        (line,) = importlib.metadata.distribution("zoo").locate_file(pth[0]).read_text().split()
        assert line == str(ROOT)
