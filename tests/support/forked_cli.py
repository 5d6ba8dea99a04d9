"""The end-to-end tests' `zoo` commands, each a process forked from one that has already
imported the CLI, torch, torch_xla and what most commands import next (about 10 CPU-s of
start-up a command, paid once). `python -m tests.support.forked_cli --serve SOCKET` answers
one request a connection (tests/support/zoo_server.py is the client): a fork that becomes the
command as `python -c "from tools.cli import main; main()"` would run it, in the environment
and folder the request names, to its exit (threads joined, atexit handlers run; modules not
torn down: `exit_without_teardown`). Each answer holds the command's exit status, its stdout
and stderr (file descriptors, so C-level output is caught too), its seconds from fork to exit
(start-up imports excluded) and how many torch modules it built off the meta device: a
refusal that built none did no model work, which is what "quick" means here, however busy
the machine. The server starts no threads and no XLA runtime, so forking it is safe."""

import atexit
import dataclasses
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from core import program_start, runtime
from tests.support.zoo_server import IMPORTS_SET_FILE

STARTED_WITH = dict(os.environ)
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
import torch_xla  # noqa: E402
import transformers.models.llama.modeling_llama  # noqa: E402, F401

import benchmarks.plan.analytic  # noqa: E402, F401
import tools.cli  # noqa: E402
import tools.launch  # noqa: E402, F401
import zoo.app.generate  # noqa: E402, F401
import zoo.app.init_from  # noqa: E402, F401
import zoo.app.run  # noqa: E402, F401
import zoo.app.saved_run  # noqa: E402, F401
import zoo.app.train  # noqa: E402, F401
from eval import evaluate, export  # noqa: E402, F401  (`import eval.x` would bind eval)

# what start-up and these imports set in the environment (the PJRT backend, XLA's flags,
# libtpu's path): a command's own process sets the same when it starts, so each fork does
IMPORTS_SET = {k: v for k, v in os.environ.items() if STARTED_WITH.get(k) != v}


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


@dataclasses.dataclass
class Command:
    """A forked command the server has yet to answer: where its output goes, when it began."""
    connection: socket.socket
    files: dict[str, Path]  # "out", "err", "built"
    started: float
    deadline: float


def serve(socket_path: str) -> None:
    """Answer each connection's request ({"args", "env", "cwd", "timeout"}) with a line
    {"pid"} once its command is forked (a test may signal it), then a line of its
    {"returncode", "stdout", "stderr", "seconds", "modules_built"} (or {"timed_out": true})
    once it ends. Ends when the process that started it does."""
    parent, scratch = os.getppid(), Path(socket_path).with_name("commands")
    scratch.mkdir()  # in the client's folder, which the client removes when it ends
    Path(socket_path).with_name(IMPORTS_SET_FILE).write_text(json.dumps(IMPORTS_SET))
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(socket_path)
    listener.listen()
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    running: dict[int, Command] = {}
    while os.getppid() == parent:
        for _ in selector.select(timeout=0.02):
            connection, _ = listener.accept()
            request = json.loads(connection.makefile().readline())
            stem = f"{len(running)}-{time.monotonic_ns()}"
            files = {kind: scratch / f"{stem}.{kind}" for kind in ("out", "err", "built")}
            sys.stdout.flush()
            sys.stderr.flush()
            started = time.monotonic()
            pid = os.fork()
            if pid == 0:
                selector.close()
                listener.close()
                connection.close()
                become(request, files)  # never returns
            connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            running[pid] = Command(connection, files, started, started + request["timeout"])
        answer_ended(running)


def become(request: dict, files: dict[str, Path]) -> None:
    """This fork turns into the requested `zoo` command (or `python -m MODULE`, a test's
    worker): its environment, folder, argv and standard streams; the command's SystemExit
    (or uncaught exception, printed as Python prints it) ends the process, which then writes
    how many modules it built."""
    os.environ.clear()
    os.environ.update(request["env"])
    for key, value in IMPORTS_SET.items():
        os.environ.setdefault(key, value)
    torch_xla._setup_xla_flags()  # what its import adds to the request's own XLA flags
    os.chdir(request["cwd"])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, kind in ((1, "out"), (2, "err")):
        os.dup2(os.open(files[kind], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    program_start._marked = time.time()  # what a new process's import of the CLI marks
    built = count_modules_built()
    atexit.register(lambda: files["built"].write_text(str(built[0])))
    code = 1
    try:
        if request.get("module"):
            sys.argv = [request["module"], *request["args"]]
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *request["args"]]
            tools.cli.main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001  (printed as an uncaught exception would be)
        sys.excepthook(*sys.exc_info())
    exit_without_teardown(code)


def exit_without_teardown(code: int) -> None:
    """End as a normal exit does (threads joined, atexit handlers run, output flushed), but
    without tearing down every module: with torch_xla loaded that teardown took 5 of a
    refusal's 6 seconds, and it changes nothing a command wrote."""
    threading._shutdown()  # what the interpreter's exit calls first: waits on live threads
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def answer_ended(running: dict[int, Command]) -> None:
    """Send each ended command's answer; kill one past its deadline."""
    for pid, command in list(running.items()):
        ended, status = os.waitpid(pid, os.WNOHANG)
        if not ended:
            if time.monotonic() > command.deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                answer = {"timed_out": True}
            else:
                continue
        else:
            built = command.files["built"]
            answer = {"returncode": os.waitstatus_to_exitcode(status),
                      "stdout": command.files["out"].read_text(errors="replace"),
                      "stderr": command.files["err"].read_text(errors="replace"),
                      "seconds": time.monotonic() - command.started,
                      "modules_built": int(built.read_text()) if built.exists() else None}
        del running[pid]
        with command.connection:
            command.connection.sendall(json.dumps(answer).encode() + b"\n")
        for path in command.files.values():
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    serve(sys.argv[2])  # --serve SOCKET
