import shutil
import subprocess

import pytest

from tests.support.paths import ROOT


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (ROOT / ".venv/bin/ruff").exists(),
    reason="ruff is installed by setup_vm.sh (dev extra)",
)
def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(ROOT / ".venv/bin/ruff")
    result = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
