"""Two writers against one checkpoint location, as users meet them: a second run, a run of
another family, a resume that moved its checkpoint_dir, a copy of the run on another VM
while the first still writes. Each is refused in one line with nothing written; the run
that owns the location resumes."""

import json
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.runs import popen_zoo, zoo

# by default: tests/unit/test_location_lease.py (owner and lease refusals, a live lease, a
# lease left behind) and tests/e2e/test_damaged_files.py (a damaged owner record)
pytestmark = pytest.mark.slow

TINY = ["llama-tiny", "steps=2", "checkpoint_every=1", "global_batch_size=2", "seq_len=32"]


def snapshot(folder) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(result, words: str) -> None:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr[-2000:]


REFUSALS = [
    (["llama-tiny", "--out", "{s}/b", "checkpoint_dir={s}/ck"],
     "belongs to another run (llama-tiny, run folder {s}/a)"),
    (["mixtral-tiny", "--out", "{s}/m", "checkpoint_dir={s}/ck"], "belongs to a llama run"),
    ([*TINY, "--out", "{s}/a", "steps=4", "checkpoint_dir={s}/ck2"],
     "has checkpoints up to step 2 in {s}/ck, none in {s}/ck2"),
    ([*TINY, "--out", "{s}/a", "steps=4"], "none in {s}/a/checkpoints; resume with"),
    (["llama-tiny", "--out", "{s}/x", "checkpoint_dir=memory://zoo/x"],
     "an in-memory location vanishes when the run exits"),
]


@pytest.fixture(scope="module")
def owned(tmp_path_factory):
    """Run A has saved steps 1 and 2 to SCRATCH/ck; then every refusal was tried (two at a
    time: each is mostly process start-up). (scratch, location, answers, files before)."""
    scratch = tmp_path_factory.mktemp("owner")
    location = scratch / "ck"
    result = zoo("train", *TINY, f"checkpoint_dir={location}", "--out", str(scratch / "a"))
    assert result.returncode == 0, result.stderr[-3000:]
    before = snapshot(scratch)
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(lambda args: zoo("train", *[a.format(s=scratch) for a in args],
                                                 timeout=120), [a for a, _ in REFUSALS]))
    return scratch, location, answers, before


@pytest.mark.parametrize("case", range(len(REFUSALS)),
                         ids=[" ".join(a[:2]) + " " + a[-1] for a, _ in REFUSALS])
def test_a_second_writer_is_refused(owned, case):
    scratch, _, answers, _ = owned
    refused(answers[case], REFUSALS[case][1].format(s=scratch))


def test_refusals_wrote_nothing(owned):
    scratch, _, _, before = owned
    assert snapshot(scratch) == before


def test_a_copy_of_the_run_waits_for_the_writing_one(owned):
    scratch, location, _, _ = owned
    shutil.copytree(scratch / "a", scratch / "copy")  # the same run, on another VM's disk
    writer = popen_zoo("train", *TINY, "steps=1000", "checkpoint_every=1000",
                       f"checkpoint_dir={location}", "--out", str(scratch / "a"))
    lease = location / "lease.json"
    deadline = time.time() + 120
    while not (lease.exists() and json.loads(lease.read_text())["pid"] == writer.pid):
        assert writer.poll() is None and time.time() < deadline, "the writer did not start"
        time.sleep(0.2)
    second = zoo("train", *TINY, "steps=1000", f"checkpoint_dir={location}",
                 "--out", str(scratch / "copy"), timeout=120)
    refused(second, f"is being written by pid {writer.pid}")
    writer.send_signal(signal.SIGTERM)  # it saves, releases the location and exits
    _, stderr = writer.communicate(timeout=120)
    assert writer.returncode == 0, stderr[-2000:]
    assert not lease.exists()
