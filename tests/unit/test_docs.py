"""The documentation stays readable and whole: the README is short (the rest lives in docs/),
the site builds with every link and anchor checked, and no page points at an issue tracker's
numbers or at a folder outside the repository, which a reader of the site cannot follow."""

import os
import re
import subprocess
import sys

from tests.support.paths import ROOT

README_MAX_BYTES = 12_000
# "issue 31", "#28", "stop 40"; "../shared", "shared/facts.md", "/work/..."
OUTSIDE_REFERENCE = re.compile(r"\bissues? #?\d+|(?<![\w&])#\d+|\bstop \d+\b|\.\./shared"
                               r"|\bshared/facts|/work/", re.IGNORECASE)


def user_pages() -> list:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted((ROOT / "benchmarks" / "results").glob("*.md"))]


def test_readme_is_short():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail into docs/"


def test_site_builds_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # the theme's end-of-life banner
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_issue_numbers_or_outside_paths():
    found = [f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
             for page in user_pages()
             for number, line in enumerate(page.read_text().splitlines(), 1)
             if OUTSIDE_REFERENCE.search(line)]
    assert not found, "\n".join(found)
