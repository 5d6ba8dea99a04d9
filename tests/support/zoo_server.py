"""The end-to-end tests' `zoo` commands, each a fork of one server process per test worker
that has imported torch, torch_xla and the CLI once (tests/support/forked_cli.py --serve):
about 10 CPU-s of start-up a command, paid once. The fork is otherwise the command a user
runs: its own process, environment, folder, exit status and output, ended as a normal exit
ends (threads joined, atexit handlers run). A command in an environment no server of the
worker was started in gets a second server; past MAX_SERVERS it runs as a new interpreter.
A command's pid is known once it is forked, so a test may signal it (runs.py popen_zoo)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.support.paths import ROOT

START_TIMEOUT_S = 300  # its imports, on a busy machine
# the variables a request may set apart from the server's, as nothing reads them at import
# (a fork re-applies what torch_xla's import adds to XLA_FLAGS): pytest's name for the test;
# zoo's cache folder (a test's "VM disk"); the XLA runtime's devices and flags, read when it
# starts (a multi-device test's workers); where a process stands among a slice's hosts, read
# when a run joins its group (tests/e2e/test_hosts.py); and what libraries set in a pytest
# worker when a test there uses them (torch's inductor its cache folder, OpenMP's duplicate
# library switch), read only by that use
READ_WHEN_RUN = ("PYTEST_CURRENT_TEST", "ZOO_CACHE",
                 "PJRT_DEVICE", "CPU_NUM_DEVICES", "XLA_FLAGS",
                 "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHINDUCTOR_CACHE_DIR", "KMP_DUPLICATE_LIB_OK")
# what the server's start-up and imports set in its environment, beside its socket
IMPORTS_SET_FILE = "imports-set.json"


class ZooServer:
    def __init__(self, env: dict):
        self.env = env
        folder = Path(tempfile.mkdtemp(prefix="zoo-server-"))
        self.socket_path, self.log = str(folder / "socket"), folder / "log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.forked_cli", "--serve", self.socket_path],
                env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        atexit.register(self.stop, folder)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not Path(self.socket_path).exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the zoo server did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)
        self.imports_set = json.loads((folder / IMPORTS_SET_FILE).read_text())

    def stop(self, folder: Path) -> None:
        """Ends the server with its worker, and removes its socket, log and scratch."""
        self.process.kill()
        self.process.wait()
        shutil.rmtree(folder, ignore_errors=True)

    def serves(self, env: dict) -> bool:
        return self.process.poll() is None and not self.differences(env)

    def differences(self, env: dict) -> list[str]:
        """The variables `env` sets apart from the environment this server serves: neither
        one read only when run, nor one set as the server's imports set it (a worker that
        imported torch_xla itself holds those too)."""
        served, asked = self._compared(self.env), self._compared(env)
        return sorted(k for k in served.keys() | asked.keys() if served.get(k) != asked.get(k))

    def _compared(self, env: dict) -> dict:
        return {k: v for k, v in env.items()
                if k not in READ_WHEN_RUN and self.imports_set.get(k) != v}

    def run(self, args: list[str], env: dict, timeout: float, cwd: Path = ROOT) -> dict:
        """`zoo *args` to its end: {"returncode", "stdout", "stderr", "seconds" (fork to
        exit), "modules_built"}."""
        command = self.start(args, env, timeout, cwd)
        command.wait()
        return command.answer

    def start(self, args: list[str], env: dict, timeout: float, cwd: Path = ROOT,
              module: str | None = None) -> ForkedCommand:
        """`zoo *args` (or `python -m module *args`) started in `cwd`, forked by the
        server."""
        connection = socket.socket(socket.AF_UNIX)
        connection.connect(self.socket_path)
        request = {"args": args, "env": env, "cwd": str(cwd), "timeout": timeout,
                   "module": module}
        connection.sendall(json.dumps(request).encode() + b"\n")
        return ForkedCommand(["python", "-m", module] if module else ["zoo"], args, timeout,
                             connection)


class ForkedCommand:
    """A `zoo` command the server forked, as much of subprocess.Popen as the tests use: its
    pid from the start (to signal it), its exit status and output once it ends."""

    def __init__(self, program: list[str], args: list[str], timeout: float,
                 connection: socket.socket):
        self.args, self.timeout = [*program, *args], timeout
        self._connection, self._lines = connection, connection.makefile()
        self.pid = json.loads(self._lines.readline())["pid"]
        self.answer: dict | None = None
        self._reader = threading.Thread(target=self._read_answer, daemon=True)
        self._reader.start()

    def _read_answer(self) -> None:
        with self._connection, self._lines:
            self.answer = json.loads(self._lines.readline())

    @property
    def returncode(self) -> int | None:
        return None if self.answer is None else self.answer.get("returncode")

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; TimeoutExpired past `timeout`, or when the server killed the
        command at its own deadline."""
        self._reader.join(timeout)
        if self.answer is None or self.answer.get("timed_out"):
            raise subprocess.TimeoutExpired(self.args, timeout or self.timeout)
        return self.answer["returncode"]

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.answer["stdout"], self.answer["stderr"]

    def send_signal(self, signum: int) -> None:
        if self.answer is None:  # not reaped yet: the pid is still the command's
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


MAX_SERVERS = 3  # a worker's servers (each holds torch, torch_xla and transformers: ~1 GiB)
_servers: list[ZooServer] = []
_starting = threading.Lock()  # two commands side by side may ask for it at once


def server_for(env: dict) -> ZooServer | None:
    """A server of this worker that serves `env`: one started earlier, else a new one (an
    in-process test may set a variable, as torch's inductor does its cache folder, after
    the first started); None once MAX_SERVERS serve other environments."""
    with _starting:
        found = next((server for server in _servers if server.serves(env)), None)
        if found is None and len(_servers) < MAX_SERVERS:
            found = ZooServer(env)
            _servers.append(found)
    return found


def differences(env: dict) -> list[str]:
    """The variables `env` sets apart from the environment this worker's first server
    serves."""
    return _servers[0].differences(env) if _servers else []
