"""Bad input, as a new user types it: a non-zero exit, one line on stderr naming what was wrong
and what to do, no traceback, an answer within seconds, and nothing on disk changed."""

import time

import pytest

from tests.support.runs import zoo

NOT_YAML = "steps: [1, 2\nseq_len: 3\n"

CASES = {
    "negative steps": (["train", "llama-tiny", "steps=-5"], "steps must be at least 1, not -5"),
    "zero steps": (["train", "llama-tiny", "--steps", "0"], "steps must be at least 1, not 0"),
    "zero batch": (["train", "llama-tiny", "global_batch_size=0"],
                   "global_batch_size must be at least 1"),
    "config file not YAML": (["train", "llama-tiny", "--config", "{folder}/bad.yaml"],
                             "is not valid YAML at line 2"),
    "sequence longer than the model": (["train", "llama-tiny", "seq_len=100000"],
                                       "longer than the model's max_position_embeddings (8192)"),
    "TPU VM name": (["tpu", "create", "bad name;rm", "--tpu", "v4-8", "--zone",
                     "us-central2-b", "--dry-run"], "'bad name;rm' is not a valid TPU VM name"),
    "plan batch that train refuses": (["plan", "llama-8b", "--tpu", "v5p-128",
                                       "global_batch_size=8"],
                                      "global batch size 8 does not split over 16 hosts"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_nonzero_quick_and_harmless(case, tmp_path):
    (tmp_path / "bad.yaml").write_text(NOT_YAML)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    args, message = CASES[case]
    args = [a.format(folder=tmp_path) for a in args]
    if args[0] == "train":
        args += ["--out", str(tmp_path / "run")]
    start = time.monotonic()
    result = zoo(*args, timeout=60)
    took = time.monotonic() - start
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1 and message in lines[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr + result.stdout
    assert took < 15, f"{took:.1f} s"
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before
