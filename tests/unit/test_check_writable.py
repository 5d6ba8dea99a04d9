"""core/checkpoint.check_writable: a checkpoint location that cannot be written fails in
one line, in seconds, before anything is built."""

import time

import pytest

from core.store.checkpoint import CheckpointError, check_writable
from core.store.location import PROBE_TIMEOUT_S


def test_a_bucket_out_of_reach_fails_in_seconds_and_quietly(capfd):
    """No network or no credentials: gcsfs would retry for about a minute, printing a
    traceback for each attempt; the write probe gives up after PROBE_TIMEOUT_S."""
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=r"^cannot write checkpoints to gs://zoo-nosuch"):
        check_writable("gs://zoo-nosuch-bucket-1f3a/run")
    assert time.monotonic() - start < PROBE_TIMEOUT_S + 3
    assert "Traceback" not in capfd.readouterr().err


def test_a_missing_location_is_made_and_removed_again(tmp_path):
    check_writable(tmp_path / "runs" / "a" / "checkpoints")
    assert list(tmp_path.iterdir()) == []  # no empty folders left behind
