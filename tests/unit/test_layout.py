"""The package's shape, read from its sources (every import, lazy ones too): imports point
down the layers, no cycles, and torch_xla is imported in one folder only, the xla
backend's, so the rest of zoo runs without it (the dtensor backend)."""

import ast

from tests.support.paths import ROOT

# lower first: a module may import its own layer or a lower one
LAYERS = ("zoo.core", "zoo.tasks", "zoo.models", "zoo.app", ("zoo.benchmarks", "zoo.eval"),
          "zoo.tools")
XLA_FOLDER = ROOT / "zoo" / "core" / "backends" / "xla"


def modules() -> dict[str, object]:
    """Every module of the package by its name, which its path spells."""
    found = {}
    for path in (ROOT / "zoo").rglob("*.py"):
        parts = [p for p in path.relative_to(ROOT).with_suffix("").parts if p != "__init__"]
        # the scaffold's source is not a module of zoo, nor is what a hidden folder holds
        if "_template" not in parts and not any(p.startswith(".") for p in parts):
            found[".".join(parts)] = path
    return found


def imports(path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def graph() -> dict[str, set[str]]:
    known = modules()
    edges = {}
    for name, path in known.items():
        targets = set()
        for imported in imports(path):
            while imported and imported not in known:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        edges[name] = targets
    return edges


def layer(module: str) -> int:
    """The module's floor; the namespace root `zoo` (which imports nothing) is the ground."""
    if module == "zoo":
        return -1
    for index, names in enumerate(LAYERS):
        names = names if isinstance(names, tuple) else (names,)
        if any(module == n or module.startswith(n + ".") for n in names):
            return index
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS")


def test_imports_point_down_the_layers():
    upward = [(a, b) for a, targets in graph().items() for b in targets if layer(b) > layer(a)]
    assert not upward, upward


def test_no_import_cycle():
    edges, seen, cycles = graph(), set(), []

    def visit(module, path):
        if module in path:
            cycles.append(path[path.index(module):] + [module])
            return
        if module in seen:
            return
        for target in sorted(edges[module]):
            visit(target, path + [module])
        seen.add(module)

    for module in sorted(edges):
        visit(module, [])
    assert not cycles, cycles[0]


def test_torch_xla_is_imported_in_the_xla_backend_only():
    outside = sorted(
        str(path.relative_to(ROOT)) for path in modules().values()
        if not path.is_relative_to(XLA_FOLDER)
        and any(name.split(".")[0] == "torch_xla" for name in imports(path)))
    assert not outside, outside
