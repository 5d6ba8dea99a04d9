"""`zoo plan --search`'s input checks: a slice the TPU compiler cannot target is refused
before anything is planned, and `--compile` beside `--search` is said to add nothing (the
search compiles every configuration it keeps). Its workers ending on SIGTERM:
tests/e2e/test_plan_search.py."""

import pytest

from benchmarks.plan import search as search_module
from benchmarks.plan.search_space import search_space
from core.errors import UserError


@pytest.mark.parametrize("tpu", ["cpu-4", "v3-8"])
def test_a_slice_the_compiler_cannot_target_is_refused_in_one_line(tpu):
    with pytest.raises(UserError) as refused:
        search_space("llama-tiny", tpu, [], 16)
    assert str(refused.value) == (
        "--search (it compiles each configuration with the TPU compiler) needs a v4, v5p, "
        f"v5e or v6e slice, not {tpu}")


def test_compile_beside_search_is_said_to_add_nothing(monkeypatch):
    """The search's own compiles are not run here (none finishes: nothing fits)."""
    monkeypatch.setattr(search_module.Scheduler, "run", lambda self, model, tpu: None)
    said = []
    with pytest.raises(UserError, match="none of the 0 compiled configurations"):
        search_module.search("llama-tiny", "v5p-8", ["sharding=fsdp", "remat=none"], None, 1,
                             1, lambda text, err=False: said.append((text, err)),
                             compile_=True)
    assert ("--search compiles every configuration it keeps: --compile adds nothing",
            True) in said
