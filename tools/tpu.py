"""What `zoo tpu ...` and `zoo train --on NAME` do, on top of gcloud (tools/gcloud.py) and
the worker-side shell (tools/remote.py): every step is a gcloud call, printed instead of run
with --dry-run."""

from __future__ import annotations

import os
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from core.errors import UserError
from core.store.run_folder import (
    CHECKPOINTS,
    LOCATION_CONFIG,
    LOCK,
    METRICS,
    RUN_CONFIG,
    RUN_ID,
)
from tools import remote
from tools.gcloud import Gcloud, Node, create, delete, scp, ssh

REPO_ROOT = Path(__file__).resolve().parents[1]
# Shipped when the tree is no git checkout (an unpacked archive): the packages and what
# setup_vm.sh installs them from.
SOURCE_ALLOW_LIST = ("core", "zoo", "benchmarks", "eval", "tools", "tests", "pyproject.toml",
                     "setup_vm.sh", "README.md")
# Never shipped to the workers, at any depth: history, the local installs (zoo's, MaxText's
# for `zoo bench --compare maxtext`), caches, half-written and packaging files ...
SYNC_EXCLUDES = {".git", ".venv", ".venv-maxtext", remote.RUN_DIR, "__pycache__",
                 ".pytest_cache", ".ruff_cache"}
# ... and at the top of the tree: what runs and local builds produce (eval/tasks/data ships)
SYNC_EXCLUDES_AT_TOP = {"runs", "checkpoints", "data", "wandb", "build"}


def repo_files(root: Path = REPO_ROOT) -> list[Path]:
    """The files `sync` ships: the source tree, local edits and new files included (what git
    tracks plus what it does not ignore; without git, SOURCE_ALLOW_LIST), never a run
    folder, checkpoint location or export, wherever `--out` or `zoo export` put it."""
    files = _git_files(root)
    if files is None:
        files = [path for name in SOURCE_ALLOW_LIST for path in
                 ((root / name).rglob("*") if (root / name).is_dir() else [root / name])]
    files = [path.relative_to(root) for path in files if path.is_file()]
    folders = {folder for path in files for folder in path.parents[:-1]}
    outputs = {folder for folder in folders if _is_output(root / folder)}
    return sorted(root / path for path in files
                  if not _left_out(path) and outputs.isdisjoint(path.parents))


def _git_files(root: Path) -> list[Path] | None:
    """Tracked and untracked-but-not-ignored files under root; None where git cannot say."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=root, capture_output=True)
    except FileNotFoundError:
        return None
    if listed.returncode:
        return None
    return [root / name for name in set(os.fsdecode(listed.stdout).split("\0")) if name]


def _left_out(path: Path) -> bool:
    return (path.parts[0] in SYNC_EXCLUDES_AT_TOP
            or any(part in SYNC_EXCLUDES or part.endswith((".partial", ".egg-info"))
                   for part in path.parts))


def _is_output(folder: Path) -> bool:
    """A run folder (its config.yaml beside checkpoints, metrics, a lock or run-id), a
    checkpoint location (run-config.yaml) or a Hugging Face export (config.json beside
    safetensors): training output, never source, even where git does not ignore it."""
    names = set(os.listdir(folder))
    return ((RUN_CONFIG in names and bool(names & {CHECKPOINTS, METRICS, LOCK, RUN_ID}))
            or LOCATION_CONFIG in names
            or ("config.json" in names and any(n.endswith(".safetensors") for n in names)))


def sync(gcloud: Gcloud, node: Node, root: Path = REPO_ROOT) -> None:
    """Copy the source tree to ~/zoo on every worker (one archive, one scp, one untar)."""
    files = repo_files(root)
    megabytes = sum(path.stat().st_size for path in files) / 1e6
    gcloud.echo(f"# sync: {len(files)} files, {megabytes:.1f} MB to ~/zoo on every worker of "
                f"{node.name} (the source tree: no runs, checkpoints or exports)")
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "zoo-sync.tar.gz"
        if not gcloud.dry_run:
            with tarfile.open(archive, "w:gz") as tar:
                for path in files:
                    tar.add(path, arcname=str(path.relative_to(root)))
        gcloud.run(scp(node, str(archive), "~/zoo-sync.tar.gz"))
        gcloud.run(ssh(node, remote.unpack("~/zoo-sync.tar.gz")))


def setup(gcloud: Gcloud, node: Node) -> None:
    sync(gcloud, node)
    gcloud.run(ssh(node, remote.setup()), note="install on every worker (idempotent)")


def send_secrets(gcloud: Gcloud, node: Node, environ=os.environ) -> None:
    """HF_TOKEN / WANDB_API_KEY from this shell to the workers in a mode-600 file that the
    run sources and deletes: never in argv, never printed."""
    text = remote.secrets_file_text(environ)
    if text is None:
        return
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "secrets.env"
        path.touch(mode=0o600)
        path.write_text(text)
        names = [n for n in remote.SECRET_NAMES if environ.get(n)]
        gcloud.run(scp(node, str(path), f"~/{remote.SECRETS_FILE}"),
                   note=f"{', '.join(names)} in a mode-600 file, not on any command line")
        gcloud.run(ssh(node, f"chmod 600 ~/{remote.SECRETS_FILE}"))


def run(gcloud: Gcloud, node: Node, argv: list[str], env: dict[str, str] | None = None) -> None:
    """Start argv on all workers in the background; logs in ~/zoo/.zoo-run/log per worker."""
    if not argv:
        raise UserError("nothing to run: give the command after --, e.g. "
                        "zoo tpu run NAME -- zoo train llama-1b --tpu v4-32")
    send_secrets(gcloud, node)
    gcloud.run(ssh(node, remote.start(argv, env)),
               note="background, detached; per-worker log ~/zoo/.zoo-run/log, pid file "
                    "~/zoo/.zoo-run/pid")


def logs(gcloud: Gcloud, node: Node, worker: int, follow: bool) -> None:
    gcloud.run(ssh(node, remote.logs(follow), worker=str(worker)), check=not follow)


def stop(gcloud: Gcloud, node: Node) -> None:
    gcloud.run(ssh(node, remote.stop()), note="ends only the recorded process groups")


def worker_states(gcloud: Gcloud, node: Node) -> list[str]:
    """running / exited N / idle, per worker line of output."""
    result = gcloud.run(ssh(node, remote.status()), capture=True, check=False)
    return [line.strip() for line in (result.stdout or "").splitlines() if line.strip()]


def check_accelerator(gcloud: Gcloud, node: Node, accelerator: str) -> None:
    info = gcloud.state(node)
    if gcloud.dry_run:
        return
    if info is None:
        raise UserError(f"TPU VM {node.name} does not exist in {node.zone}; create it with "
                        f"zoo tpu create {node.name} --tpu {accelerator} --zone {node.zone}")
    found = info.get("acceleratorType", "?")
    if found != accelerator:
        raise UserError(f"{node.name} is a {found}, not a {accelerator}; use --tpu {found} "
                        "or another node")


def launch_training(gcloud: Gcloud, node: Node, model: str, accelerator: str,
                    train_args: list[str], follow: bool = True) -> None:
    """`zoo train MODEL --tpu TYPE --on NAME`: check, sync, start everywhere, follow worker 0."""
    check_accelerator(gcloud, node, accelerator)
    sync(gcloud, node)
    run(gcloud, node, [".venv/bin/zoo", "train", model, "--tpu", accelerator, *train_args])
    if follow:
        logs(gcloud, node, worker=0, follow=True)


def babysit(gcloud: Gcloud, node: Node, accelerator: str, argv: list[str], *, spot: bool,
            preemptible: bool, version: str | None, max_restarts: int, backoff: float,
            poll: float, data_disk: str | None = None, echo=print) -> int:
    """Keep `argv` running on a spot/preemptible node until worker 0 reports success.

    A node that is gone or preempted is deleted (if needed), recreated, set up, and the
    command started again: training resumes from its latest complete checkpoint, which
    must live on storage every incarnation of the node sees (see README). Returns 0 on
    success; gives up after `max_restarts` restarts with a summary."""
    if gcloud.dry_run:  # one incarnation: what a (re)start runs
        gcloud.state(node)
        gcloud.run(create(node, accelerator, version, spot, preemptible, data_disk),
                   note="when the node is gone or preempted (after deleting it)")
        setup(gcloud, node)
        run(gcloud, node, argv)
        echo(f"# then poll every {poll:g} s: node state and worker 0's exit; restart up to "
             f"{max_restarts} times with backoff {backoff:g} s x 2^n")
        return 0
    restarts, history = 0, []

    def restart(reason: str) -> bool:
        nonlocal restarts
        history.append(reason)
        if restarts >= max_restarts:
            return False
        wait = backoff * 2**restarts
        restarts += 1
        echo(f"babysit: {reason}; restart {restarts}/{max_restarts} in {wait:g} s")
        time.sleep(wait)
        return True

    started = False
    while True:
        info = gcloud.state(node)
        state = (info or {}).get("state", "GONE")
        if state != "READY":
            if info is not None:
                gcloud.run(delete(node))
            gcloud.run(create(node, accelerator, version, spot, preemptible, data_disk))
            started = False
        if not started:
            setup(gcloud, node)
            run(gcloud, node, argv)
            started = True
        time.sleep(poll)
        info = gcloud.state(node)
        state = (info or {}).get("state", "GONE")
        if state != "READY":
            if restart(f"node {state.lower()}"):
                continue
            break
        workers = worker_states(gcloud, node)
        first = workers[0] if workers else "unknown"
        if first == "exited 0":
            echo(f"babysit: done after {restarts} restart(s)")
            return 0
        if first.startswith("exited") or first == "idle":
            started = False
            if restart(f"command {first} on worker 0"):
                continue
            break
    echo(f"babysit: giving up after {restarts} restart(s) (limit {max_restarts}); "
         f"events: {'; '.join(history)}; last state {state}")
    return 1
