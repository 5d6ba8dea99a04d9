"""Every test, and every `zoo` a test starts, caches tokenized corpora in one scratch folder
of the session instead of the user's ~/.cache/zoo. The suite's two workers (pytest-xdist) each
take whole files, so a file's module and class fixtures run once; the files that share a
session fixture of tests/e2e/conftest.py (a pretrained run, its tuned adapters) go to one
worker together, so those run once too; so do the families' preset tests, whose XLA runs
are made for all of them at once (tests/support/family_presets.py)."""

import fnmatch
import os

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


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole files to each worker (xdist's loadfile); the files in SHARED_RUN_FILES as one,
    and the families' preset tests as one."""
    from xdist.scheduler import LoadFileScheduling

    class Files(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            if file in SHARED_RUN_FILES:
                return "shared-runs"
            return "family-presets" if fnmatch.fnmatch(file, FAMILY_PRESET_FILES) else file

    return Files(config, log)
