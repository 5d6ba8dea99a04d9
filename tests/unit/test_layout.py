"""The project's shape, read from its sources (every import, lazy ones too): imports point
down the floors at every depth, no private name crosses a module, and torch_xla is imported
in one folder only, the xla backend's, so the rest of zoo runs without it (the dtensor
backend). The top floors are the design card's; inside a package its rooms (the modules and
folders beside each other) import each other without a cycle, so an order exists in which
every import points down."""

import ast
from pathlib import Path

from tests.support.paths import ROOT

# lower first: a module may import its own floor or a lower one; a module's floor is that of
# the longest name here that prefixes it (zoo.tasks.x is on zoo.tasks', zoo.llama.x on zoo's)
LAYERS = ("core", "zoo.data", "zoo.common", "zoo.tasks", "zoo", "zoo.app", ("benchmarks", "eval"),
          "tools")
PACKAGES = ("core", "zoo", "benchmarks", "eval", "tools")
XLA_FOLDER = ROOT / "core" / "backends" / "xla"


def modules() -> dict[str, Path]:
    """Every module of the project's packages by its name, which its path spells."""
    found = {}
    for path in (p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
        parts = [p for p in path.relative_to(ROOT).with_suffix("").parts if p != "__init__"]
        # the scaffold's source is not a module of zoo, nor is what a hidden folder holds
        if "_template" not in parts and not any(p.startswith(".") for p in parts):
            found[".".join(parts)] = path
    return found


def imported_names(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) for each `import module` and `from module import name`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.module, alias.name) for alias in node.names]
    return found


def graph() -> dict[str, set[str]]:
    """module -> the project's modules it imports (`from core import mesh` is core.mesh)."""
    known = modules()
    edges = {}
    for name, path in known.items():
        targets = set()
        for module, attribute in imported_names(path):
            imported = f"{module}.{attribute}" if f"{module}.{attribute}" in known else module
            while imported and imported not in known:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        edges[name] = targets
    return edges


def layer(module: str) -> int:
    """The module's floor: that of the longest LAYERS name prefixing it."""
    floors = {name: index for index, names in enumerate(LAYERS)
              for name in (names if isinstance(names, tuple) else (names,))}
    owners = [n for n in floors if module == n or module.startswith(n + ".")]
    assert owners, f"{module} is in no layer: add its folder to LAYERS"
    return floors[max(owners, key=len)]


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, or None."""
    done, found = set(), []

    def visit(node, path):
        if node in path:
            found.append(path[path.index(node):] + [node])
        elif node not in done:
            for target in sorted(edges.get(node, ())):
                visit(target, path + [node])
            done.add(node)

    for node in sorted(edges):
        visit(node, [])
    return found[0] if found else None


def rooms_of(package: str, edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between the rooms of one package (a room: a module or folder in it; an
    import from anywhere inside a room is the room's). A package's own __init__ may import its
    rooms (it is their door), and a room may not import the package's door."""
    def room(module):
        if not module.startswith(package + "."):
            return None
        return package + "." + module[len(package) + 1:].split(".")[0]

    between = {}
    for source, targets in edges.items():
        here = room(source)
        if here is not None:
            between.setdefault(here, set()).update(
                there for there in map(room, targets) if there not in (None, here))
    return between


def test_imports_point_down_the_floors():
    upward = [(a, b) for a, targets in graph().items() for b in targets if layer(b) > layer(a)]
    assert not upward, upward


def test_no_family_imports_another():
    """A family (a zoo/<name>/ folder holding family.py, as the registry finds them) builds on
    core, zoo.common and zoo.tasks: a change to one family is a change to it alone."""
    families = {path.parent.name for path in (ROOT / "zoo").glob("*/family.py")}
    assert {"llama", "mixtral", "deepseek3"} <= families, families

    def family_of(module):
        parts = module.split(".")
        return parts[1] if parts[0] == "zoo" and len(parts) > 1 and parts[1] in families else None

    crossing = sorted(f"{a} imports {b}" for a, targets in graph().items() for b in targets
                      if family_of(a) and family_of(b) not in (None, family_of(a)))
    assert not crossing, crossing


def test_no_room_imports_its_own_package_door():
    doors = [(a, b) for a, targets in graph().items() for b in targets
             if a.startswith(b + ".") and modules()[b].name == "__init__.py"]
    assert not doors, doors


def test_no_cycle_between_rooms_at_any_depth():
    edges = graph()
    packages = {name for name, path in modules().items() if path.name == "__init__.py"}
    found = {package: cycle(rooms_of(package, edges)) for package in sorted(packages)}
    assert not any(found.values()), {p: c for p, c in found.items() if c}
    assert cycle(edges) is None, cycle(edges)


def test_no_private_name_crosses_a_module():
    known = modules()
    crossing = sorted(
        f"{name} imports {module}.{attribute}"
        for name, path in known.items()
        for module, attribute in imported_names(path)
        if module.split(".")[0] in PACKAGES and attribute and attribute.startswith("_")
        and f"{module}.{attribute}" not in known)
    assert not crossing, crossing


def test_torch_xla_is_imported_in_the_xla_backend_only():
    outside = sorted(
        str(path.relative_to(ROOT)) for path in modules().values()
        if not path.is_relative_to(XLA_FOLDER)
        and any(module.split(".")[0] == "torch_xla" for module, _ in imported_names(path)))
    assert not outside, outside
