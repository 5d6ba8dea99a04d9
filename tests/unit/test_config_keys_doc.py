"""The docs' config key tables (every `| key | type | default | meaning |` table under docs/:
the run's keys in training.md, `data.*` on the data pages, `lora.*` in lora.md) name every
key of every run schema once per table, with the dataclasses' type and default, and no key
the schema does not have. A `SECTION.*` row points at a section documented elsewhere. The
keys training.md says a resumed run may change are those the schema marks `resumable`."""

import re
import types
import typing

import yaml

from core.run_config import resumable
from tests.support.paths import ROOT
from tests.support.run_schemas import leaf_keys, own_tasks, run_schemas

HEADER = "| key | type | default | meaning |"
CODE = re.compile(r"`([^`]*)`")
CELL = re.compile(r"(?<!\\)\|")  # an escaped \| stays in its cell


def key_tables() -> list[tuple[str, list[list[str]]]]:
    """(page, the cells of each row) for each key table."""
    tables = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.strip() != HEADER:
                continue
            rows = []
            for row in lines[number + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([cell.strip() for cell in CELL.split(row.strip()[1:-1])])
            tables.append((str(page.relative_to(ROOT)), rows))
    return tables


def type_name(kind) -> str:
    """A key's type as the docs write it."""
    args = typing.get_args(kind)
    if isinstance(kind, types.UnionType) and type(None) in args:
        return f"{type_name(next(a for a in args if a is not type(None)))} or null"
    if typing.get_origin(kind) is list:
        return f"list of {type_name(args[0])}"
    if typing.get_origin(kind) is dict:
        return f"map of {type_name(args[0])} to {type_name(args[1])}"
    return kind.__name__


def schema_keys() -> dict[str, tuple[set[str], list]]:
    """{key: (its type names, its defaults)} over every run schema."""
    found: dict[str, tuple[set[str], list]] = {}
    for (_, task), schema in run_schemas().items():
        for key, (kind, default) in leaf_keys(schema).items():
            names, defaults = found.setdefault(key, (set(), []))
            names.add(type_name(kind))
            # `task` defaults to the one chosen: a family's own is the one left unsaid
            if default not in defaults and not (key == "task" and task not in own_tasks()):
                defaults.append(default)
    return found


def sections() -> set[str]:
    return {key.rpartition(".")[0] for key in schema_keys() if "." in key} | {"model"}


def same(written, default) -> bool:
    """A default as the docs write it (YAML) is the dataclass's, of its type; a float may be
    written as an int (`120`) or as YAML 1.1 reads `3e-4` (a string)."""
    if isinstance(default, float) and isinstance(written, int | str) and not isinstance(
            written, bool):
        try:
            written = float(written)
        except ValueError:
            return False
    return type(written) is type(default) and written == default


def test_every_key_table_matches_the_dataclasses():
    keys, problems = schema_keys(), []
    for page, rows in key_tables():
        for key_cell, type_cell, default_cell, _ in rows:
            key = CODE.fullmatch(key_cell)
            if key is None:
                problems.append(f"{page}: row {key_cell!r} names no single `key`")
                continue
            key = key.group(1)
            if key.endswith(".*"):
                if key[:-2] not in sections():
                    problems.append(f"{page}: {key} is no section of the schema")
                continue
            if key not in keys:
                problems.append(f"{page}: {key} is no key of any run schema")
                continue
            names, defaults = keys[key]
            if set(type_cell.split(", ")) != names:
                problems.append(f"{page}: {key} is {', '.join(sorted(names))}, not {type_cell}")
            written = [yaml.safe_load(value) for value in CODE.findall(default_cell)]
            if not (all(any(same(w, d) for d in defaults) for w in written)
                    and all(any(same(w, d) for w in written) for d in defaults)):
                problems.append(f"{page}: {key} defaults to {defaults}, not {default_cell}")
    assert not problems, "\n".join(problems)


def test_every_key_of_every_schema_is_in_a_key_table_once():
    named = []
    for page, rows in key_tables():
        keys = [row[0] for row in rows]
        assert len(keys) == len(set(keys)), f"{page}: a key twice in one table"
        named += [CODE.fullmatch(key).group(1) for key in keys if CODE.fullmatch(key)]
    missing = sorted(set(schema_keys()) - set(named))
    assert not missing, f"keys in no docs key table: {', '.join(missing)}"
    run_keys = [rows for page, rows in key_tables() if page == "docs/training.md"]
    assert len(run_keys) == 1
    for section in ("data", "model", "lora"):  # documented on their own pages
        assert any(row[0] == f"`{section}.*`" for row in run_keys[0]), section


def test_the_docs_list_the_keys_a_resumed_run_may_change():
    text = (ROOT / "docs" / "training.md").read_text()
    listed = text[text.index("These may change freely:"):].split(".\n", 1)[0]
    written = {key.removesuffix("*") for key in CODE.findall(listed)}
    marked = {key for schema in run_schemas().values() for key in resumable(schema)}
    assert written == marked
