"""`zoo` in a subprocess, as a user runs it, for the end-to-end tests (and the quick CLI
checks): run it, train to a run folder, SIGKILL a run and resume it, read its losses.
Every `zoo` runs from the repo root, so `tests.support` (e.g. the custom optimizer
`tests.support.custom_optim:SGDWithUpdateNorm`) is importable in it."""

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from core.config import SAVED_CONFIG_END
from tests.support.paths import ROOT
from tests.support.zoo_server import differences, server_for


def saved_config(text: str) -> str:
    """A run's config.yaml (or a checkpoint location's run-config.yaml) holding `text`, as
    zoo saves one: with the line zoo writes last, without which it is refused as cut short."""
    return f"{text}{SAVED_CONFIG_END}\n"


def zoo_command(*args):
    return [sys.executable, "-c", "from tools.cli import main; main()", *args]


def env():
    """Every test's environment for `zoo`: offline, as the Hub is from every test."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def zoo(*args, timeout=600, cwd=ROOT):
    """`zoo *args` to its end, started in `cwd`: a fork of this worker's zoo server where it
    serves this environment (tests/support/zoo_server.py), else a new interpreter."""
    environment = env()
    server = server_for(environment)
    if server:
        answer = server.run(list(args), environment, timeout, cwd)
        return subprocess.CompletedProcess(["zoo", *args], answer["returncode"],
                                           answer["stdout"], answer["stderr"])
    return subprocess.run(zoo_command(*args), env=environment, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def zoo_here(*args: str):
    """A `zoo` command run in this process (click's runner: no interpreter to start, for a
    command that needs no devices of its own, as export and generate); its result has
    `exit_code` and `output`."""
    from click.testing import CliRunner

    from tools.cli import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def popen_zoo(*args, extra_env: dict | None = None, timeout=600):
    """`zoo *args` started, not awaited (see start_python)."""
    return start_python(list(args), {**env(), **(extra_env or {})}, timeout)


def start_python(args: list[str], environment: dict, timeout=600, module: str | None = None):
    """`zoo *args`, or `python -m module *args` (a multi-device test's worker), started from
    the repo root, not awaited: a ForkedCommand of this worker's zoo server where it serves
    `environment`, else a new interpreter (subprocess.Popen); either one's `communicate()`
    gives (stdout, stderr)."""
    server = server_for(environment)
    if server:
        return server.start(args, environment, timeout, module=module)
    program = [sys.executable, "-m", module] if module else zoo_command()
    return subprocess.Popen([*program, *args], env=environment, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def side_by_side(commands: list[tuple], run=zoo) -> list:
    """Two commands (`run(*args)`) side by side: each waits on one core part of the time.
    Both must succeed."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda args: run(*args), commands))
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    return results


def forked_zoo(commands: list[list[str]]) -> list[dict]:
    """Many short `zoo` commands, two at a time, each a fork of this worker's zoo server:
    per command its returncode, stdout, stderr, seconds from fork to exit and the torch
    modules it built."""
    environment = env()
    server = server_for(environment)
    assert server, f"the zoo server serves another environment: {differences(environment)}"
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda args: server.run(args, environment, 600), commands))


def write_scratch(scratch: Path, files: dict[str, str | bytes]) -> dict[Path, bytes]:
    """`files` (relative name -> text or bytes) written under `scratch`; every file there
    then, with its bytes: a bad input must leave them all as they were."""
    for name, data in files.items():
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        write = (scratch / name).write_bytes if isinstance(data, bytes) else (
            scratch / name).write_text
        write(data)
    return snapshot(scratch)


def snapshot(folder: Path) -> dict[Path, bytes]:
    """Every file under `folder`, with its bytes."""
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


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
    to the end; returns the rerun's result and its wall seconds."""
    proc = popen_zoo("train", *args, "--out", str(out))
    deadline = time.time() + 300
    while not (out / "checkpoints" / f"step-{first:08d}" / "manifest.json").exists():
        assert proc.poll() is None and time.time() < deadline, f"run ended before step {first}"
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    began = time.time()
    resumed = zoo("train", *args, "--out", str(out))
    seconds = time.time() - began
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step" in resumed.stdout
    return resumed, seconds
