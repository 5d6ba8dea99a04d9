"""Many short `zoo` commands, each in its own process forked from one that has already
imported the CLI, torch, torch_xla and what most commands import next (about 2 s a
command, most of a bad input's answer, paid once).
Each child is otherwise the command a user runs: its own process and environment, its exit
status, its stdout and stderr (file descriptors, so C-level output is caught too), an
uncaught exception printed as Python prints it. Two run at a time; the parent starts no
threads and no XLA runtime, so forking it is safe. Records, per command, returncode, stdout,
stderr, seconds from fork to exit (start-up imports excluded), and how many torch modules
it built off the meta device: a refusal that built none did no model work, which is what
"quick" means here, however busy the machine (a command that hangs is killed after
TIMEOUT_S).
Usage (from the repo root): python -m tests.support.forked_cli COMMANDS.json OUT.json
(COMMANDS.json: a list of argument lists, e.g. [["train", "nosuchmodel"]]).

`--serve SOCKET` serves the end-to-end tests' `zoo` commands one request at a time instead
(tests/support/zoo_server.py is the client): each a fork that becomes the command as
`python -c "from tools.cli import main; main()"` would run it, to its normal exit (threads
joined, atexit handlers run), in the environment and folder the request names."""

import json
import os
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

from core import runtime

runtime.configure()
# imported once, before forking: torch, torch_xla and the CLI, and what most commands import
# next (the train command's launcher and its run, a saved run and an --init-from source,
# every family, the analytic plan; generate, export and eval with transformers' Llama and
# lm-eval's task index; fsspec, psutil, safetensors, omegaconf): ~0.3 CPU-s a command.
# Imports only: no model is built, no thread or runtime started.
import fsspec  # noqa: E402, F401
import lm_eval.evaluator  # noqa: E402, F401
import lm_eval.tasks  # noqa: E402, F401
import omegaconf  # noqa: E402, F401
import psutil  # noqa: E402, F401
import safetensors.torch  # noqa: E402, F401
import torch  # noqa: E402
import torch_xla  # noqa: E402, F401
import transformers.models.llama.modeling_llama  # noqa: E402, F401

import benchmarks.plan.analytic  # noqa: E402, F401
import tools.launch  # noqa: E402, F401
import zoo.app.generate  # noqa: E402, F401
import zoo.app.init_from  # noqa: E402, F401
import zoo.app.run  # noqa: E402, F401
import zoo.app.saved_run  # noqa: E402, F401
import zoo.app.train  # noqa: E402, F401
from eval import evaluate, export  # noqa: E402, F401  (`import eval.x` would bind eval)
from tools.cli import cli  # noqa: E402

PARALLEL = 2
TIMEOUT_S = 600  # a hang, not a slow answer: the machine may be busy


def child(args: list[str], out: Path, err: Path, built: Path) -> None:
    """Runs in the fork: the command's output into `out` and `err`, the number of torch
    modules it built into `built`; never returns."""
    code = 1
    modules = count_modules_built()
    try:
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        cli.main(args, prog_name="zoo")
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001  (shown as an uncaught exception would be)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        built.write_text(str(modules[0]))
        os._exit(code)


def count_modules_built() -> list[int]:
    """A one-item list counting every torch.nn.Module made from now on in this process
    outside the meta device (where a model is only bookkeeping: shapes, parameter counts)."""
    count = [0]
    make = torch.nn.Module.__init__

    def counted(self, *args, **kwargs):
        count[0] += torch.get_default_device().type != "meta"
        make(self, *args, **kwargs)

    torch.nn.Module.__init__ = counted
    return count


def run_all(commands: list[list[str]], scratch: Path) -> list[dict]:
    results, running, queue = [None] * len(commands), {}, list(enumerate(commands))
    while queue or running:
        while queue and len(running) < PARALLEL:
            index, args = queue.pop(0)
            out, err, built = (scratch / f"{index}.{kind}" for kind in ("out", "err", "built"))
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                child(args, out, err, built)
            running[pid] = (index, out, err, built, time.monotonic())
        pid, status = reap(running)
        index, out, err, built, start = running.pop(pid)
        results[index] = {"returncode": os.waitstatus_to_exitcode(status),
                          "stdout": out.read_text(errors="replace"),
                          "stderr": err.read_text(errors="replace"),
                          "seconds": time.monotonic() - start,
                          "modules_built": int(built.read_text()) if built.exists() else None}
    return results


def reap(running: dict) -> tuple[int, int]:
    """The next child to end; one that outlives TIMEOUT_S is killed (and reaped)."""
    while True:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid:
            return pid, status
        now = time.monotonic()
        for late, (*_, start) in running.items():
            if now - start > TIMEOUT_S:
                os.kill(late, signal.SIGKILL)
        time.sleep(0.02)


def main(commands_file: str, out_file: str) -> None:
    commands = json.loads(Path(commands_file).read_text())
    with tempfile.TemporaryDirectory() as scratch:
        results = run_all(commands, Path(scratch))
    Path(out_file).write_text(json.dumps(results))


def serve(socket_path: str) -> None:
    """Answer each connection's request ({"args", "env", "cwd", "timeout"}) with its
    command's {"returncode", "stdout", "stderr"} (or {"timed_out": true}) once it ends.
    Ends when the process that started it does."""
    parent, scratch = os.getppid(), Path(tempfile.mkdtemp(prefix="zoo-server-"))
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(socket_path)
    listener.listen()
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    running: dict[int, tuple] = {}  # pid -> (connection, stdout file, stderr file, deadline)
    while os.getppid() == parent:
        for _ in selector.select(timeout=0.02):
            connection, _ = listener.accept()
            request = json.loads(connection.makefile().readline())
            out, err = (scratch / f"{len(running)}-{time.monotonic_ns()}.{kind}"
                        for kind in ("out", "err"))
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                selector.close()
                listener.close()
                connection.close()
                become(request, out, err)
                return  # to the interpreter's normal exit, as the command's own process
            running[pid] = (connection, out, err, time.monotonic() + request["timeout"])
        answer_ended(running)
    shutil.rmtree(scratch, ignore_errors=True)


def become(request: dict, out: Path, err: Path) -> None:
    """This fork turns into the requested `zoo` command: its environment, folder, argv and
    standard streams; the command's SystemExit (or uncaught exception) ends the process."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    sys.argv = ["-c", *request["args"]]
    from tools.cli import main

    main()


def answer_ended(running: dict) -> None:
    """Send each ended command's answer; kill one past its deadline."""
    for pid, (connection, out, err, deadline) in list(running.items()):
        ended, status = os.waitpid(pid, os.WNOHANG)
        if not ended:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                answer = {"timed_out": True}
            else:
                continue
        else:
            answer = {"returncode": os.waitstatus_to_exitcode(status),
                      "stdout": out.read_text(errors="replace"),
                      "stderr": err.read_text(errors="replace")}
        del running[pid]
        with connection:
            connection.sendall(json.dumps(answer).encode())
        for path in (out, err):
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve(sys.argv[2])
    else:
        main(*sys.argv[1:])
