"""One benchmark entry's worker process: run, once more if it crashed, its whole log kept.

A worker killed by a signal (a SIGSEGV inside the runtime, say) may not fail the same way
twice, so it is run once more and the harness says so. Any failure leaves the worker's
whole output (stdout and stderr, not only its last line) in a file whose path the message
names, under the run's `logs/` folder.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import tempfile
from pathlib import Path

from tqdm import tqdm

from core.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
WORKER = "benchmarks.worker"  # the module each entry's process runs
ATTEMPTS = 2  # a crashed worker is run once more


class EntryFailed(UserError):
    """An entry whose worker failed (twice, if it crashed): the suite goes on without it."""

    def __init__(self, message: str, log: Path):
        super().__init__(message)
        self.log = log


def run_worker(launcher: list[str], job: dict, label: str, log_dir: Path | None) -> dict:
    """The worker's JSON record for `job`, with `crashed_logs`: the logs of the attempts
    that crashed before it (the entry was run again). `label` names the entry in messages
    and files; `log_dir`: where failed attempts' logs go (a temporary folder when None)."""
    attempt, crashed = 1, []
    while True:
        proc = subprocess.run([*launcher, "-m", WORKER, json.dumps(job)],
                              capture_output=True, text=True, cwd=ROOT)
        if proc.returncode == 0:
            return {**json.loads(proc.stdout.strip().splitlines()[-1]), "crashed_logs": crashed}
        log = _write_log(log_dir, label, attempt, launcher, proc)
        cause = _cause(proc)
        if proc.returncode >= 0 or attempt == ATTEMPTS:
            raise EntryFailed(f"benchmark entry {label} failed: {cause}; the worker's whole "
                              f"log: {log}", log)
        tqdm.write(f"{label}: the worker crashed ({cause}); its log: {log}; "
                   "running the entry once more")
        crashed.append(str(log))
        attempt += 1


def _cause(proc: subprocess.CompletedProcess) -> str:
    """The signal that killed the worker, or its last line on stderr."""
    if proc.returncode < 0:
        try:
            return f"killed by {signal.Signals(-proc.returncode).name}"
        except ValueError:
            return f"killed by signal {-proc.returncode}"
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {proc.returncode}, no output"


def _write_log(log_dir: Path | None, label: str, attempt: int, launcher: list[str],
               proc: subprocess.CompletedProcess) -> Path:
    folder = log_dir or Path(tempfile.gettempdir()) / "zoo-bench-logs"
    folder.mkdir(parents=True, exist_ok=True)
    stem = "-".join(re.findall(r"[\w.-]+", label))  # "tiny-scan-4dev (zoo)": tiny-scan-4dev-zoo
    path = folder / f"{stem}-attempt{attempt}.log"
    path.write_text(
        f"# {' '.join([*launcher, '-m', WORKER])} '<job>'\n# exit status {proc.returncode} "
        f"({_cause(proc)})\n\n## stdout\n{proc.stdout}\n## stderr\n{proc.stderr}"
    )
    return path
