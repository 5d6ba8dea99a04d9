"""`zoo` in a subprocess, as a user runs it, for the end-to-end tests (and the quick CLI
checks): run it, train to a run folder, SIGKILL a run and resume it, read its losses.
Every `zoo` runs from the repo root, so `tests.support` (e.g. the custom optimizer
`tests.support.custom_optim:SGDWithUpdateNorm`) is importable in it."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.paths import ROOT


def zoo_command(*args):
    return [sys.executable, "-c", "from zoo.tools.cli import main; main()", *args]


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}


def zoo(*args, timeout=600):
    return subprocess.run(zoo_command(*args), env=env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def popen_zoo(*args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(zoo_command(*args), env=env(), cwd=ROOT, **kwargs)


def losses(run: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}  # not eval records


def trained_run(tmp_path_factory, args: list[str]) -> Path:
    """The run folder of `zoo train *args`, which must succeed."""
    out = tmp_path_factory.mktemp(args[0]) / "run"
    result = zoo("train", *args, "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def kill_after_first_checkpoint_then_rerun(args: list[str], out: Path, first: int):
    """Start `zoo train *args --out OUT`, SIGKILL it once checkpoint `first` exists, rerun it
    to the end; returns the rerun's result."""
    proc = popen_zoo("train", *args, "--out", str(out), stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (out / "checkpoints" / f"step-{first:08d}" / "manifest.json").exists():
        assert proc.poll() is None and time.time() < deadline, f"run ended before step {first}"
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    resumed = zoo("train", *args, "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step" in resumed.stdout
    return resumed
