"""Two processes standing in for the two hosts of a slice (torch_xla's CPU runtime cannot span
processes, so each runs its own copy of the program on the same global batch; they agree over
gloo, as a slice's hosts do). What this covers: SIGTERM on one host makes every host save the
same step and exit 0, one metrics writer, one run-folder lock, and an exact resume. What it
does not: a program whose arrays span the hosts (each host here holds the whole state)."""

import json
import os
import signal
import socket
import subprocess
import time

from tests.support.paths import ROOT
from tests.support.runs import env, losses, zoo, zoo_command

SMALL = ["llama-tiny", "--tpu", "cpu-1", "model.num_hidden_layers=1", "seq_len=64",
         "global_batch_size=4", "log_every=1", "optim.lr=1e-3", "checkpoint_every=1000",
         "wandb.project=zoo-test"]


def start_hosts(out, steps: int, hosts: int = 2) -> list[subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [
        subprocess.Popen(
            zoo_command("train", *SMALL, "--steps", str(steps), "--out", str(out)),
            env={**env(), "RANK": str(rank), "WORLD_SIZE": str(hosts),
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in range(hosts)
    ]


def finish(procs) -> list[str]:
    logs = [proc.communicate(timeout=300)[0] for proc in procs]
    for proc, log in zip(procs, logs):
        assert proc.returncode == 0, log[-3000:]
    return logs


def test_sigterm_on_one_host_saves_the_same_step_everywhere_and_resumes_exactly(
        tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # W&B offline
    monkeypatch.delenv("WANDB_MODE", raising=False)
    reference = tmp_path / "reference"
    assert zoo("train", *SMALL, "--steps", "16", "--out", str(reference)).returncode == 0

    out = tmp_path / "run"
    procs = start_hosts(out, steps=16)
    deadline = time.time() + 300
    while not (out / "metrics.jsonl").exists() or len(losses(out)) < 3:
        assert all(p.poll() is None for p in procs) and time.time() < deadline
        time.sleep(0.1)
    os.kill(procs[1].pid, signal.SIGTERM)  # host 1 only
    logs = finish(procs)
    saved = [line for log in logs for line in log.splitlines() if "SIGTERM: saved step" in line]
    assert len(saved) == 2 and saved[0] == saved[1], logs
    step = int(saved[0].split("saved step ")[1].split(",")[0])
    assert 3 <= step < 16
    folder = out / "checkpoints" / f"step-{step:08d}"
    assert {p.name for p in folder.glob("rng-*.pt")} == {"rng-00000.pt", "rng-00001.pt"}

    logs = finish(start_hosts(out, steps=16))
    assert f"resuming from step {step}" in logs[0]
    assert losses(out) == losses(reference)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 17))  # one writer: every step once
    # one W&B run across the restart, written by the main host alone
    run_id = (out / "wandb-run-id").read_text().strip()
    offline = sorted(p.name for p in (out / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(name.endswith(f"-{run_id}") for name in offline)
