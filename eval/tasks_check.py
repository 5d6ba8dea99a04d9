"""Resolve `--tasks` before any model is loaded: aliases, the shipped sample tasks, folders
of task YAMLs, and lm-eval's built-in tasks, with Hub datasets checked for reachability."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml

from core.errors import UserError

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
ROOT = TASKS_DIR.parent.parent  # the checkout, or site-packages for an install
# where the shipped tasks' data_files live, relative to ROOT (as the YAMLs spell them)
DATA_FOLDERS = ("eval/tasks/data/", "zoo/assets/instructions/")
ALIASES = {"arc": ["arc_easy", "arc_challenge"]}
LOCAL_BUILDERS = {"json", "csv", "parquet", "text", "arrow"}


def sample_tasks_dir() -> Path:
    """The shipped sample tasks with absolute data paths (their YAMLs use paths relative to
    the repo root, which is where lm-eval resolves them), so any working directory works."""
    out = Path(tempfile.gettempdir()) / "zoo-sample-tasks"
    out.mkdir(exist_ok=True)
    for source in TASKS_DIR.iterdir():
        if source.suffix in (".yaml", ".py"):
            text = source.read_text()
            for folder in DATA_FOLDERS:
                text = text.replace(folder, f"{ROOT / folder}/")
            _write_whole(out / source.name, text)
    return out


def _write_whole(file: Path, text: str) -> None:
    """Write `text` unless the file holds it already, replacing it whole: evals running at
    once share the folder, and a file rewritten in place is empty for a moment to the
    others (lm-eval then fails on "Expected YAML dict ... got NoneType")."""
    try:
        if file.read_text() == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    partial = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    os.replace(partial, file)


def sample_task_names() -> list[str]:
    return declared_task_names(TASKS_DIR)


def declared_task_names(folder: Path) -> list[str]:
    """The tasks a folder of lm-eval YAMLs declares: each file's `task:` name, or its
    `group:` when `task:` lists the members; files that declare neither (bases that others
    `include:`) add nothing. File names do not matter, as in lm-eval."""
    from lm_eval.tasks._yaml_loader import load_yaml  # lm_eval

    names = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            config = load_yaml(str(path), resolve_func=False, recursive=False) or {}
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark else ""
            raise UserError(f"task file {path} is not valid YAML{where}: "
                            f"{getattr(error, 'problem', None) or error}; fix it or move it "
                            "out of the folder") from None
        if not isinstance(config, dict):
            raise UserError(f"task file {path} must be a mapping of lm-eval task keys "
                            "(task:, dataset_path:, ...), see eval/tasks/*.yaml")
        task, group = config.get("task"), config.get("group")
        name = task if isinstance(task, str) else group if isinstance(group, str) else None
        if name:
            names.append(name)
    return names


def resolve_tasks(spec: str) -> tuple[list[str], object]:
    """'arc,hellaswag_sample,./my_tasks' -> (task names, lm-eval TaskManager)."""
    from lm_eval.tasks import TaskManager  # lm_eval

    names, include = [], [str(sample_tasks_dir())]
    for item in filter(None, (part.strip() for part in spec.split(","))):
        if Path(item).is_dir():
            include.append(str(Path(item).resolve()))
            declared = declared_task_names(Path(item))
            if not declared:
                raise UserError(f"task folder {item} has no YAML declaring a `task:` or "
                                "`group:`; add one (see eval/tasks/*.yaml)")
            names += declared
        else:
            names += ALIASES.get(item, [item])
    if not names:
        raise UserError(f"--tasks {spec!r} names no task; give comma-separated task names, "
                        f"e.g. --tasks {','.join(sample_task_names())}")
    manager = TaskManager(include_path=include, include_defaults=False)
    if any(name not in manager.all_tasks for name in names):
        manager = TaskManager(include_path=include)  # index lm-eval's built-ins (~7 s)
    unknown = [name for name in names if name not in manager.all_tasks]
    if unknown:
        raise UserError(f"unknown task '{unknown[0]}'; sample tasks (offline): "
                        f"{', '.join(sample_task_names())}; or any lm-eval task name, "
                        "or a folder of task YAMLs")
    _check_hub_datasets(names, manager)
    return names, manager


def _check_hub_datasets(names: list[str], manager) -> None:
    from lm_eval.tasks._yaml_loader import load_yaml  # lm_eval

    from core.data import hub_reachable  # start-up

    reachable = None
    for name in names:
        entry = manager.task_index[name]
        config = load_yaml(entry.yaml_path, resolve_func=False, recursive=True) \
            if entry.yaml_path else {}
        dataset = config.get("dataset_path")
        if not dataset or dataset in LOCAL_BUILDERS or Path(dataset).exists():
            continue
        reachable = hub_reachable() if reachable is None else reachable
        if not reachable:
            raise UserError(
                f"task '{name}' needs the Hugging Face Hub dataset '{dataset}', which is "
                "unreachable from here (offline?); use the local sample tasks "
                f"({', '.join(sample_task_names())}) or run where the Hub is reachable")
