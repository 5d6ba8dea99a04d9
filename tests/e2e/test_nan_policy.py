"""A run that diverges (lr far too high: step 2's loss is NaN) either stops in one line with
its last good checkpoint kept (nan_policy=stop, the default) or skips the bad steps and
leaves weights and optimizer state as they were (nan_policy=skip). A run too short to time
reports no step time, throughput or MFU rather than a burst's."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from core.store.checkpoint_reader import load_checkpoint
from tests.support.runs import zoo

# by default: tests/unit/test_nan_guard.py (the guard under each policy)
pytestmark = pytest.mark.slow

DIVERGES = ["llama-tiny", "steps=4", "checkpoint_every=1", "keep_checkpoints=4",
            "global_batch_size=2", "seq_len=32", "optim.lr=1e12", "optim.grad_clip=0",
            "schedule.warmup_steps=1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("nan")
    policies = ["stop", "skip"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda p: zoo("train", *DIVERGES, f"nan_policy={p}", "--out",
                                          str(scratch / p)), policies)
        return {policy: (scratch / policy, result) for policy, result in zip(policies, results)}


def steps_saved(run) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").glob("step-*"))


def test_stop_names_the_step_and_keeps_the_last_good_checkpoint(runs):
    run, result = runs["stop"]
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == ("Error: step 2: loss nan, grad_norm nan; training stopped before "
                         "saving it (the last checkpoint, step 1, is kept); lower optim.lr, "
                         "or set nan_policy=skip to skip such steps"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert steps_saved(run) == ["step-00000001"]


def test_skip_leaves_the_weights_as_they_were(runs):
    run, result = runs["skip"]
    assert result.returncode == 0, result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert "step 2: loss nan, grad_norm nan; step skipped (nan_policy=skip)" in output
    assert steps_saved(run) == [f"step-0000000{i}" for i in range(1, 5)]
    first, last = (load_checkpoint(run / "checkpoints" / f"step-0000000{i}") for i in (1, 4))
    assert all(torch.equal(first[name], last[name]) for name in first)
    assert all(tensor.isfinite().all() for tensor in last.values())


def test_a_run_too_short_to_time_reports_no_speed(runs):
    run, result = runs["skip"]  # 4 steps: 2 warm-up, 2 timed (3 are needed)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["mfu"] is None and r["step_time_s"] is None for r in records)
    assert "too few steps to time (after 2 warm-up steps, 3 are timed)" in result.stdout
