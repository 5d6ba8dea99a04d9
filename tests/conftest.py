"""Every test, and every `zoo` a test starts, caches tokenized corpora in one scratch folder
of the session instead of the user's ~/.cache/zoo. The suite's two workers (pytest-xdist) each
take whole files, so a file's module and class fixtures run once; the files that share a
session fixture of tests/e2e/conftest.py (a pretrained run, its tuned adapters) go to one
worker together, so those run once too; so do the families' preset tests, whose XLA runs
are made for all of them at once (tests/support/family_presets.py). The longest scopes go
first (their seconds measured in tests/scope_seconds.json; `pytest --store-scope-seconds`
measures them again), so the two workers end together."""

import collections
import fnmatch
import json
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def scratch_token_cache(tmp_path_factory):
    os.environ["ZOO_CACHE"] = str(tmp_path_factory.mktemp("zoo-cache"))
    yield
    os.environ.pop("ZOO_CACHE", None)


# the session fixtures of tests/e2e/conftest.py that several files share, and those files
SHARED_RUNS = ("pretrained_run", "tuned_with_adapters")
SHARED_RUN_FILES = ("tests/e2e/test_dpo.py", "tests/e2e/test_eval.py", "tests/e2e/test_lora.py",
                    "tests/e2e/test_sft.py")
# the families' preset tests (one XLA run per device count for all of them)
FAMILY_PRESET_FILES = "tests/multidevice/test_*_presets.py"


def pytest_collection_modifyitems(items):
    """A test that uses a shared run must be in SHARED_RUN_FILES (else its worker would
    make the run again)."""
    for item in items:
        file = item.nodeid.split("::")[0]
        if set(SHARED_RUNS) & set(item.fixturenames) and file not in SHARED_RUN_FILES:
            raise pytest.UsageError(f"{file} uses a shared run: add it to SHARED_RUN_FILES "
                                    "in tests/conftest.py")


SCOPE_SECONDS = Path(__file__).parent / "scope_seconds.json"


def scope_of(nodeid: str) -> str:
    """The unit one worker runs whole: a file, or one of the groups named above."""
    file = nodeid.split("::")[0]
    if file in SHARED_RUN_FILES:
        return "shared-runs"
    return "family-presets" if fnmatch.fnmatch(file, FAMILY_PRESET_FILES) else file


def pytest_addoption(parser):
    parser.addoption("--store-scope-seconds", action="store_true",
                     help=f"write each scope's measured seconds to {SCOPE_SECONDS.name}, "
                          "which orders the scopes of later runs (longest first)")


def pytest_configure(config):
    if config.getoption("store_scope_seconds") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ScopeSeconds(), "scope-seconds")
    if hasattr(config, "workerinput"):  # one worker of two, one per core
        import torch

        # torch's own eager work in this process on one thread: two threads a worker spun
        # waiting on the core the other worker holds (bf16 training in test_precision.py:
        # 13 s alone, 61 s in the suite)
        torch.set_num_threads(1)


class ScopeSeconds:
    """Sums every test phase's seconds by scope (on the controller, which sees every
    worker's reports) and writes them at the end of the session. Seconds are only a
    ranking: a busy machine scales them all alike."""

    def __init__(self):
        self.seconds = collections.Counter()

    def pytest_runtest_logreport(self, report):
        self.seconds[scope_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self):
        """The scopes this session ran replace their old figures; the others are kept."""
        measured = json.loads(SCOPE_SECONDS.read_text()) if SCOPE_SECONDS.exists() else {}
        measured.update({scope: round(s, 1) for scope, s in self.seconds.items()})
        ranked = dict(sorted(measured.items(), key=lambda item: -item[1]))
        SCOPE_SECONDS.write_text(json.dumps(ranked, indent=1) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole scopes to each worker (xdist's loadfile), the longest first: a scope's seconds
    as last measured, or a second a test for a scope not measured yet."""
    from xdist.scheduler import LoadFileScheduling

    measured = json.loads(SCOPE_SECONDS.read_text()) if SCOPE_SECONDS.exists() else {}

    class LongestFirst(LoadFileScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node):
            if not self.ordered:  # the queue is complete when the first unit is handed out
                def cost(scope):
                    return measured.get(scope, len(self.workqueue[scope]))
                for scope in sorted(self.workqueue, key=cost, reverse=True):
                    self.workqueue.move_to_end(scope)
                self.ordered = True
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


@pytest.fixture
def modules_built(monkeypatch):
    """A one-item list counting the torch modules made off the meta device from now on
    (transformers' import-time activations made already: this counts models): a refusal
    that made none built no model."""
    import torch
    import transformers.activations  # noqa: F401

    count = [0]
    make = torch.nn.Module.__init__

    def counted(self, *args, **kwargs):
        count[0] += torch.get_default_device().type != "meta"
        make(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "__init__", counted)
    return count
