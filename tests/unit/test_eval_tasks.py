"""`zoo eval --tasks DIR`: tasks are the names the YAMLs declare, not their file names."""

from pathlib import Path

import pytest

from core.errors import UserError
from eval.tasks_check import TASKS_DIR, declared_task_names, resolve_tasks


def heldout_folder(folder: Path) -> Path:
    """arc_easy_sample under another task name, in a file named after neither."""
    text = (TASKS_DIR / "arc_easy_sample.yaml").read_text()
    text = text.replace("task: arc_easy_sample", "task: heldout_arc")
    text = text.replace("eval/tasks/data/", f"{TASKS_DIR}/data/")
    (folder / "heldout.yaml").write_text(text)
    (folder / "base.yaml").write_text("output_type: multiple_choice\n")  # included, no task
    return folder


def test_task_names_come_from_the_yaml_not_the_file_name(tmp_path):
    assert declared_task_names(heldout_folder(tmp_path)) == ["heldout_arc"]
    names, manager = resolve_tasks(str(tmp_path))
    assert names == ["heldout_arc"] and "heldout_arc" in manager.all_tasks


def test_a_group_yaml_is_named_by_its_group(tmp_path):
    (tmp_path / "mine.yaml").write_text("group: my_suite\ntask:\n  - arc_easy_sample\n")
    assert declared_task_names(tmp_path) == ["my_suite"]


def test_a_folder_without_task_yamls_is_one_line(tmp_path):
    (tmp_path / "base.yaml").write_text("output_type: multiple_choice\n")
    with pytest.raises(UserError, match="declaring a `task:` or `group:`"):
        resolve_tasks(str(tmp_path))


def test_a_task_yaml_that_does_not_parse_is_one_line_naming_file_and_line(tmp_path):
    (tmp_path / "mine.yaml").write_text("output_type: multiple_choice\ntask: [x\n")
    with pytest.raises(UserError, match=r"mine.yaml is not valid YAML at line 3: "):
        resolve_tasks(str(tmp_path))


def test_tasks_naming_no_task_is_one_line():
    with pytest.raises(UserError, match="--tasks ', ,' names no task; give comma-separated"):
        resolve_tasks(", ,")
