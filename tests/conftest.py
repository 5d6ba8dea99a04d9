"""Every test, and every `zoo` a test starts, caches tokenized corpora in one scratch folder
of the session instead of the user's ~/.cache/zoo."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def scratch_token_cache(tmp_path_factory):
    os.environ["ZOO_CACHE"] = str(tmp_path_factory.mktemp("zoo-cache"))
    yield
    os.environ.pop("ZOO_CACHE", None)
