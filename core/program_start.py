"""When this program began, for the goodput account (core/goodput.py).

A process may be older than the program it runs: a shell execs the last command of
`bash -c "./setup_vm.sh && zoo train ..."` in its own process, so the process's creation
time is the shell's, before the setup ran (the README's first command counted its install
as the run's training_prep). The command line marks when it is first imported; the
account starts at the later of the two (the interpreter's own start before the mark,
about 0.5 s, is left out)."""

from __future__ import annotations

import time

_marked: float | None = None


def mark() -> None:
    """This program began now (once per process: the first mark is kept)."""
    global _marked
    if _marked is None:
        _marked = time.time()


def marked() -> float | None:
    """The mark's epoch seconds, or None where no command line ran (zoo as a library)."""
    return _marked
