"""The shell that `zoo tpu` runs on every worker, built with shlex quoting so any user
command (spaces, quotes, `$`, backslashes) arrives intact.

On each worker the repo lives in ~/zoo and a run keeps its files in ~/zoo/.zoo-run/:
`log` (stdout+stderr), `pid` (the process group id: the command runs in its own session)
and `exit` (its exit code, once it ended). Secrets come from ~/.zoo-secrets (mode 600,
copied there by `zoo tpu run`), which the run sources and deletes before the command starts.
"""

from __future__ import annotations

import shlex

REPO = "~/zoo"
RUN_DIR = ".zoo-run"
SECRETS_FILE = ".zoo-secrets"
SECRET_NAMES = ("HF_TOKEN", "WANDB_API_KEY")


def secrets_file_text(environ: dict) -> str | None:
    """`export NAME=value` lines for the secrets set here, or None if there are none."""
    lines = [f"export {name}={shlex.quote(environ[name])}" for name in SECRET_NAMES
             if environ.get(name)]
    return "\n".join(lines) + "\n" if lines else None


def start(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Start `argv` in ~/zoo in the background, detached from the ssh session, with `env`
    (e.g. a slice's MEGASCALE_* settings) exported."""
    exports = "".join(f"export {name}={shlex.quote(value)}; "
                      for name, value in (env or {}).items())
    body = (
        f"if [ -f ~/{SECRETS_FILE} ]; then set -a; . ~/{SECRETS_FILE}; set +a; "
        f"rm -f ~/{SECRETS_FILE}; fi; "
        f"export PATH=$HOME/zoo/.venv/bin:$PATH; "  # `zoo ...` is the repo's install
        f"{exports}{shlex.join(argv)}; echo $? > {RUN_DIR}/exit"
    )
    return "\n".join([
        f"cd {REPO} || exit 1",
        f"mkdir -p {RUN_DIR} && rm -f {RUN_DIR}/exit",
        f"if [ -f {RUN_DIR}/pid ] && kill -0 -- -$(cat {RUN_DIR}/pid) 2>/dev/null; then "
        f"echo 'a run is already going: zoo tpu stop first' >&2; exit 1; fi",
        # setsid: a new session (its id is the pid) that outlives the ssh connection
        f"setsid nohup bash -c {shlex.quote(body)} > {RUN_DIR}/log 2>&1 < /dev/null &",
        f"echo $! > {RUN_DIR}/pid",
    ])


def stop() -> str:
    """End the recorded process group (and only it), then forget it."""
    return (
        f"cd {REPO} 2>/dev/null && if [ -f {RUN_DIR}/pid ]; then "
        f"kill -TERM -- -$(cat {RUN_DIR}/pid) 2>/dev/null; rm -f {RUN_DIR}/pid; "
        f"echo stopped; else echo 'nothing running'; fi"
    )


def status() -> str:
    """One word per worker: running, exited N, or idle."""
    return (
        f"cd {REPO} 2>/dev/null; "
        f"if [ -f {RUN_DIR}/pid ] && kill -0 -- -$(cat {RUN_DIR}/pid) 2>/dev/null; then "
        f"echo running; elif [ -f {RUN_DIR}/exit ]; then echo exited $(cat {RUN_DIR}/exit); "
        f"else echo idle; fi"
    )


def logs(follow: bool) -> str:
    return f"tail {'-F' if follow else '-n 200'} {REPO}/{RUN_DIR}/log"


def unpack(archive: str) -> str:
    """Replace the code in ~/zoo with the archive's, keeping .venv, runs and .zoo-run."""
    return f"mkdir -p {REPO} && tar -xzf {archive} -C {REPO} && rm -f {archive}"


def setup() -> str:
    return f"cd {REPO} && ./setup_vm.sh"
