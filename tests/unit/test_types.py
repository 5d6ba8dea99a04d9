"""The typed contracts hold: mypy, with pyproject.toml's [tool.mypy] (its `files`: the
backend seam, Task, ModelFamily, both backends and every family module), finds no error,
and it sees both backends as a `Backend` and a class missing methods as none."""

import importlib.util
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy is installed with the dev extra (setup_vm.sh)")

BACKENDS = """
from core.backends import Backend
from core.backends.dtensor import DTensorBackend
from core.backends.xla import XlaBackend


class Partial:
    def sync(self) -> None: ...


backends: list[Backend] = [XlaBackend(), DTensorBackend()]
partial: Backend = Partial()
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    """One mypy cache for this module's runs: the first reads torch's types (~15 s), the
    next reuse them (~1 s). Outside the checkout, which it would otherwise litter."""
    return str(tmp_path_factory.mktemp("mypy_cache"))


def mypy(cache: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", cache, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_contracts_and_their_implementations_type_check(cache):
    result = mypy(cache)
    assert result.returncode == 0, result.stdout + result.stderr


def test_both_backends_are_backends_and_a_partial_one_is_not(cache, tmp_path):
    program = tmp_path / "backends.py"  # a file: files given replace [tool.mypy]'s
    program.write_text(BACKENDS)
    result = mypy(cache, str(program))
    partial = next(n for n, line in enumerate(BACKENDS.splitlines(), 1)
                   if line.startswith("partial:"))
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == [str(partial)], result.stdout + result.stderr
    assert '"Partial", variable has type "Backend"' in errors[0], result.stdout
