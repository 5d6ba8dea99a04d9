"""Two processes standing in for the two hosts of a slice (torch_xla's CPU runtime cannot span
processes, so each runs its own copy of the program on the same global batch; they agree over
gloo, as a slice's hosts do). What this covers: SIGTERM on one host makes every host save the
same step and exit 0, checkpoints on each host's own disk or in one shared store, one
metrics writer, one run-folder lock, and an exact resume. What it
does not: a program whose arrays span the hosts (each host here holds the whole state)."""

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from tests.support.runs import losses, popen_zoo, zoo, zoo_here

SMALL = ["llama-tiny", "--tpu", "cpu-1", "model.num_hidden_layers=1", "seq_len=64",
         "global_batch_size=4", "log_every=1", "optim.lr=1e-3", "checkpoint_every=1000",
         "wandb.project=zoo-test"]


def start_hosts(outs, steps: int, *overrides: str) -> list[subprocess.Popen]:
    """One `zoo train` per host, host i writing its run folder at outs[i]."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [
        popen_zoo("train", *SMALL, *overrides, "--steps", str(steps), "--out", str(out),
                  extra_env={"RANK": str(rank), "WORLD_SIZE": str(len(outs)),
                             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        for rank, out in enumerate(outs)
    ]


def finish(procs) -> list[str]:
    logs = ["".join(proc.communicate(timeout=300)) for proc in procs]
    for proc, log in zip(procs, logs):
        assert proc.returncode == 0, log[-3000:]
    return logs


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Losses of the same 16 steps as one uninterrupted single-process run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert zoo("train", *SMALL, "--steps", "16", "--out", str(out)).returncode == 0
    return losses(out)


# Each host has its own run folder (its local disk). Checkpoints go either there too, each
# host committing what it holds, or to one fsspec store all hosts share: a file:// URL, which
# takes the code path of gs:// (whole-object writes, a commit marker, no renames).
# by default the shared store (the bucket's code path); each host's own disk is `slow`
@pytest.mark.parametrize("store", [pytest.param("local", marks=pytest.mark.slow), "shared"])
def test_sigterm_on_one_host_saves_the_same_step_everywhere_and_resumes_exactly(
        tmp_path, monkeypatch, reference, store):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # W&B offline
    monkeypatch.delenv("WANDB_MODE", raising=False)
    outs = [tmp_path / f"host{i}" / "run" for i in range(2)]
    shared = tmp_path / "bucket" / "checkpoints"
    overrides = [f"checkpoint_dir=file://{shared}"] if store == "shared" else []
    procs = start_hosts(outs, 16, *overrides)
    main = outs[0]
    deadline = time.time() + 300
    while not (main / "metrics.jsonl").exists() or len(losses(main)) < 3:
        assert all(p.poll() is None for p in procs) and time.time() < deadline
        time.sleep(0.1)
    os.kill(procs[1].pid, signal.SIGTERM)  # host 1 only
    logs = finish(procs)
    saved = [line for log in logs for line in log.splitlines() if "SIGTERM: saved step" in line]
    assert len(saved) == 2 and saved[0] == saved[1], logs
    step = int(saved[0].split("saved step ")[1].split(",")[0])
    assert 3 <= step < 16
    name = f"step-{step:08d}"
    if store == "shared":  # one checkpoint, both hosts' files in it
        assert {p.name for p in (shared / name).glob("rng-*.pt")} == {"rng-00000.pt",
                                                                      "rng-00001.pt"}
        assert not (outs[1] / "checkpoints").exists()
    else:  # each host committed its own part on its own disk
        for host, out in enumerate(outs):
            assert (out / "checkpoints" / name / "manifest.json").is_file()
            assert (out / "checkpoints" / name / f"rng-{host:05d}.pt").is_file()
    assert not outs[1].joinpath("metrics.jsonl").exists()  # host 0 alone writes metrics

    logs = finish(start_hosts(outs, 16, *overrides))
    assert f"resuming from step {step}" in logs[0]
    assert losses(main) == reference
    records = [json.loads(line) for line in (main / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 17))  # one writer: every step once
    # one W&B run across the restart, written by the main host alone
    run_id = (main / "wandb-run-id").read_text().strip()
    offline = sorted(p.name for p in (main / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(name.endswith(f"-{run_id}") for name in offline)
    if store == "shared":  # the bucket alone is enough to export its newest checkpoint
        url = f"file://{shared}/step-00000016"
        exported = zoo_here("export", url, str(tmp_path / "hf"))  # in this process
        assert exported.exit_code == 0, exported.output[-3000:]
        assert (tmp_path / "hf" / "config.json").is_file()
