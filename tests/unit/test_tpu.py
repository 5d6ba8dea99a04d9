"""`zoo tpu` and `zoo train --on` against a fake gcloud (tests/support/fake_gcloud/gcloud)
first on PATH: it records every invocation and really runs the worker commands with bash in
one sandbox folder per worker, so quoting, background runs, pid files, secrets and the
babysitter's restarts are exercised end to end without a TPU or the network."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import SUPPORT

SECRET = "hf_fake-SECRET-value-0123"
ZONE = ["--zone", "us-central2-b", "--project", "my-proj"]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Environment for `zoo` subprocesses with the fake gcloud, plus helpers to read it."""
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"nodes": {"node": {"state": "READY", "workers": 2,
                                                    "acceleratorType": "v4-16"}},
                                 "answers": {"./setup_vm.sh": "setup: done"}}))
    env = {**os.environ, "PATH": f"{SUPPORT / 'fake_gcloud'}:{os.environ['PATH']}",
           "FAKE_GCLOUD_STATE": str(state), "FAKE_GCLOUD_LOG": str(tmp_path / "calls.jsonl"),
           "FAKE_GCLOUD_ROOT": str(tmp_path / "workers"), "HF_TOKEN": SECRET}
    env.pop("WANDB_API_KEY", None)

    class Fake:
        root = tmp_path / "workers" / "node"

        def zoo(self, *args, timeout=120):
            return subprocess.run([sys.executable, "-c", "from tools.cli import main; main()",
                                   *args], env=env, capture_output=True, text=True,
                                  timeout=timeout)

        def calls(self):
            path = tmp_path / "calls.jsonl"
            lines = path.read_text().splitlines() if path.exists() else []
            return [json.loads(line)["argv"] for line in lines]

        def set_state(self, **changes):
            data = json.loads(state.read_text())
            data.update(changes)
            state.write_text(json.dumps(data))

        def run_file(self, worker, name):
            return self.root / f"worker-{worker}" / "zoo" / ".zoo-run" / name

        def wait_exit(self, worker=0, timeout=30):
            deadline = time.time() + timeout
            while not self.run_file(worker, "exit").exists():
                assert time.time() < deadline, "the run did not finish"
                time.sleep(0.1)
            return self.run_file(worker, "exit").read_text().strip()

    return Fake()


def test_acceptance_dry_runs_print_the_gcloud_commands(fake):
    run = fake.zoo("tpu", "run", "node", *ZONE, "--dry-run", "--", "zoo", "train", "llama-1b",
                   "--tpu", "v4-32")
    assert run.returncode == 0, run.stderr
    assert "gcloud compute tpus tpu-vm ssh node --zone us-central2-b --project my-proj " \
           "--worker=all --command" in run.stdout
    assert "setsid nohup" in run.stdout and ".zoo-run/log" in run.stdout
    train = fake.zoo("train", "llama-1b", "--tpu", "v4-32", "--on", "node", *ZONE, "--dry-run")
    assert train.returncode == 0, train.stderr
    steps = train.stdout
    assert steps.index("tpu-vm describe node") < steps.index("tpu-vm scp") < steps.index(
        "zoo train llama-1b --tpu v4-32") < steps.index("--worker=0 --command 'tail -F")
    assert fake.calls() == []  # dry runs run nothing
    assert SECRET not in run.stdout + train.stdout


def test_sync_ships_the_tree_without_git_venv_or_runs(fake):
    result = fake.zoo("tpu", "sync", "node", *ZONE)
    assert result.returncode == 0, result.stderr
    for worker in (0, 1):
        home = fake.root / f"worker-{worker}" / "zoo"
        assert (home / "README.md").is_file() and (home / "tools" / "cli.py").is_file()
        assert (home / "eval" / "tasks" / "data" / "arc_easy_sample.jsonl").is_file()
        assert not (home / ".git").exists() and not (home / ".venv").exists()
        assert not (home / "build").exists() and not list(home.glob("*.egg-info"))
    assert "# sync: " in result.stdout and " MB to ~/zoo on every worker of node" in result.stdout
    scp = next(c for c in fake.calls() if c[3] == "scp")
    assert "--worker=all" in scp and "us-central2-b" in scp and "my-proj" in scp


def test_awkward_arguments_and_secrets_reach_the_workers_intact(fake):
    fake.zoo("tpu", "sync", "node", *ZONE)
    awkward = ["a b", "it's", "$HOME", "back\\slash", '"q"', "semi;colon"]
    script = "import os, sys; print(sys.argv[1:]); print(os.environ.get('HF_TOKEN'))"
    result = fake.zoo("tpu", "run", "node", *ZONE, "--", "python3", "-c", script, *awkward)
    assert result.returncode == 0, result.stderr
    for worker in (0, 1):
        assert fake.wait_exit(worker) == "0"
        log = fake.run_file(worker, "log").read_text().splitlines()
        assert log == [repr(awkward), SECRET]
        assert not (fake.root / f"worker-{worker}" / ".zoo-secrets").exists()  # deleted
    for argv in fake.calls():
        assert SECRET not in " ".join(argv)
    assert SECRET not in result.stdout + result.stderr


def test_stop_ends_only_the_recorded_process_groups(fake):
    fake.zoo("tpu", "sync", "node", *ZONE)
    decoy = subprocess.Popen(["sleep", "60"])  # a process `stop` must not touch
    try:
        assert fake.zoo("tpu", "run", "node", *ZONE, "--", "sleep", "60").returncode == 0
        pids = [int(fake.run_file(w, "pid").read_text()) for w in (0, 1)]
        status = fake.zoo("tpu", "status", "node", *ZONE)
        assert "worker 0: running" in status.stdout and "worker 1: running" in status.stdout
        again = fake.zoo("tpu", "run", "node", *ZONE, "--", "sleep", "1")
        assert again.returncode != 0 and "already going" in again.stderr
        assert fake.zoo("tpu", "stop", "node", *ZONE).returncode == 0
        deadline = time.time() + 10
        while any(_alive(pid) for pid in pids):
            assert time.time() < deadline, "stop left a run alive"
            time.sleep(0.1)
        assert decoy.poll() is None
        stop_call = [c for c in fake.calls() if "kill -TERM" in " ".join(c)]
        assert stop_call and "$(cat .zoo-run/pid)" in stop_call[0][-1]
    finally:
        decoy.kill()
        decoy.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return "zombie"


def test_train_on_checks_the_accelerator_type(fake):
    result = fake.zoo("train", "llama-1b", "--tpu", "v4-32", "--on", "node", *ZONE)
    assert result.returncode != 0
    assert "node is a v4-16, not a v4-32; use --tpu v4-16" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_babysit_survives_two_preemptions_and_resumes(fake, tmp_path):
    """The run appends to a file outside the node (like checkpoints on persistent storage):
    the third start finds the two earlier ones and finishes."""
    progress = tmp_path / "progress"
    fake.set_state(preempt_on_starts=[1, 2], workers=1)
    fake.zoo("tpu", "delete", "node", *ZONE)
    script = (f"echo start >> {progress}; sleep 0.5; "
              f"test $(wc -l < {progress}) -ge 3 || sleep 60")
    result = fake.zoo("tpu", "babysit", "node", "--tpu", "v4-16", *ZONE, "--spot",
                      "--backoff", "0.01", "--poll", "0.2", "--", "bash", "-c", script,
                      timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "restart 1/10" in result.stdout and "restart 2/10" in result.stdout
    assert "done after 2 restart(s)" in result.stdout
    assert progress.read_text().split() == ["start"] * 3
    creates = [c for c in fake.calls() if c[3] == "create"]
    assert len(creates) == 3 and all("--spot" in c for c in creates)
    assert [c[3] for c in fake.calls()].count("delete") == 3  # the setup delete + 2 preempted


def test_babysit_gives_up_with_a_summary(fake):
    fake.set_state(preempt_on_starts=list(range(1, 10)))
    result = fake.zoo("tpu", "babysit", "node", "--tpu", "v4-16", *ZONE, "--max-restarts", "2",
                      "--backoff", "0.01", "--poll", "0.2", "--", "sleep", "30", timeout=120)
    assert result.returncode == 1
    assert "giving up after 2 restart(s) (limit 2)" in result.stdout
    assert "node preempted" in result.stdout


def test_slices_dry_run_prints_the_queued_resource_and_each_slices_megascale_settings(fake):
    create = fake.zoo("tpu", "create", "job", "--tpu", "v6e-256", "--slices", "2", *ZONE,
                      "--spot", "--dry-run")
    assert create.returncode == 0, create.stderr
    assert create.stdout.startswith(
        "gcloud compute tpus queued-resources create job --zone us-central2-b --project "
        "my-proj --accelerator-type=v6e-256 --runtime-version=v2-alpha-tpuv6e --node-count=2 "
        "--node-prefix=job --spot")
    same = fake.zoo("tpu", "create", "job", "--tpu", "2xv6e-256", *ZONE, "--spot", "--dry-run")
    assert same.stdout == create.stdout
    run = fake.zoo("tpu", "run", "job", "--slices", "2", *ZONE, "--dry-run", "--", "zoo",
                   "train", "llama-70b", "--tpu", "2xv6e-256")
    for index in (0, 1):
        assert f"tpu-vm ssh job-{index} " in run.stdout
        assert f"MEGASCALE_SLICE_ID={index}" in run.stdout
    assert run.stdout.count("MEGASCALE_NUM_SLICES=2") == 2
    assert fake.calls() == []


def test_babysit_restarts_every_slice_when_one_is_preempted(fake, tmp_path):
    """Two slices; the second's first run is preempted. The job's progress lives outside
    the nodes (a checkpoint in a bucket): slice 0 saves step 3 and is stopped with the
    rest; then both slices start again from step 3, with their megascale settings."""
    ckpt, progress = tmp_path / "ckpt", tmp_path / "progress"
    fake.set_state(preempt_on_starts=[2], workers=1)
    script = (f"n=$(cat {ckpt} 2>/dev/null || echo 0); "
              f"echo $MEGASCALE_SLICE_ID $n $MEGASCALE_COORDINATOR_ADDRESS >> {progress}; "
              f"if [ $n = 0 ]; then sleep 0.5; echo 3 > {ckpt}; sleep 60; fi")
    result = fake.zoo("tpu", "babysit", "job", "--tpu", "2xv4-16", *ZONE, "--spot",
                      "--backoff", "0.01", "--poll", "0.2", "--", "bash", "-c", script,
                      timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "restart 1/10 of all 2 slices" in result.stdout
    assert "done after 1 restart(s)" in result.stdout
    lines = progress.read_text().splitlines()
    assert sorted(lines[-2:]) == ["0 3 10.0.0.2:8080", "1 3 10.0.0.2:8080"]
    creates = [c for c in fake.calls() if c[2:4] == ["queued-resources", "create"]]
    assert len(creates) == 2 and all("--node-count=2" in c for c in creates)


def _tree(root: Path, *paths: str) -> None:
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x")


def _shipped(root: Path) -> set[str]:
    from tools.tpu import repo_files

    return {str(p.relative_to(root)) for p in repo_files(root)}


# What `zoo train --out R` and `zoo export R OUT` leave wherever they were pointed, and a
# checkpoint location outside its run folder: never source, even where git does not ignore it
OUTPUT = ("R/config.yaml", "R/metrics.jsonl", "R/checkpoints/step-00000001/model.pt",
          "zoo/R2/config.yaml", "zoo/R2/run-id", "OUT/config.json", "OUT/model.safetensors",
          "ckpt/run-config.yaml", "ckpt/step-00000001/model.pt")


def test_sync_ships_what_git_tracks_or_does_not_ignore_but_no_run_or_export(tmp_path):
    """A new family not yet committed ships; a run folder or an export never does."""
    _tree(tmp_path, "README.md", "core/gone.py", ".gitignore", "zoo/mynet/family.py",
          "zoo/mynet/config.yaml", "zoo/mynet/notes.bin", "data/shard.bin", *OUTPUT)
    (tmp_path / ".gitignore").write_text("*.bin\n")
    git = ["git", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "README.md", "core/gone.py"], check=True)
    (tmp_path / "core" / "gone.py").unlink()  # tracked, deleted here: nothing to ship
    assert _shipped(tmp_path) == {"README.md", ".gitignore", "zoo/mynet/family.py",
                                  "zoo/mynet/config.yaml"}


def test_sync_without_git_ships_the_allow_listed_source(tmp_path, monkeypatch):
    """On an unpacked archive (no git): the packages and install files, less installs,
    builds, caches, half-written files and training output."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repo above
    _tree(tmp_path, "README.md", "eval/tasks/data/arc.jsonl", "zoo/runs/keep.py", "notes.txt",
          "build/lib/zoo/old.py", "zoo.egg-info/PKG-INFO", "runs/r/metrics.jsonl",
          "data/shard.bin", ".venv/bin/python", ".git/HEAD", "core/__pycache__/a.pyc",
          "checkpoints/step-1/x", "eval/model.safetensors.partial", ".zoo-run/log",
          *(f"zoo/{path}" for path in OUTPUT))
    assert _shipped(tmp_path) == {"README.md", "eval/tasks/data/arc.jsonl", "zoo/runs/keep.py"}


def test_sync_says_how_many_files_and_megabytes_it_ships(tmp_path):
    from tools.gcloud import Gcloud, Node
    from tools.tpu import sync

    _tree(tmp_path, "README.md", "zoo/a.py", *OUTPUT)
    (tmp_path / "zoo" / "a.py").write_bytes(b"x" * 2_500_000)
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    lines = []
    sync(Gcloud(dry_run=True, echo=lines.append), Node("node", "us-central2-b"), tmp_path)
    assert lines[0] == ("# sync: 2 files, 2.5 MB to ~/zoo on every worker of node (the "
                        "source tree: no runs, checkpoints or exports)")


def test_train_on_slices_checks_every_slice_and_starts_each_with_its_settings(fake):
    fake.set_state(queued={"job": {"state": {"state": "ACTIVE"}, "nodes": ["job-0", "job-1"]}},
                   nodes={"job-0": {"state": "READY", "workers": 1, "acceleratorType": "v4-16"},
                          "job-1": {"state": "READY", "workers": 1, "acceleratorType": "v4-8"}})
    result = fake.zoo("train", "llama-1b", "--tpu", "2xv4-16", "--on", "job", *ZONE)
    assert result.returncode != 0
    assert "job-1 is a v4-8, not a v4-16; use --tpu v4-8" in result.stderr
    dry = fake.zoo("train", "llama-1b", "--tpu", "2xv4-16", "--on", "job", *ZONE, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    for index in (0, 1):
        assert "tpu-vm scp " in dry.stdout and f"job-{index}:~/zoo-sync.tar.gz" in dry.stdout
        assert f"MEGASCALE_SLICE_ID={index}" in dry.stdout
    assert "zoo train llama-1b --tpu 2xv4-16" in dry.stdout
