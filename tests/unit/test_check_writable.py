"""core/checkpoint.check_writable: a checkpoint location that cannot be written fails in
one line, in seconds, before anything is built."""

import pytest

from core.store.checkpoint import CheckpointError, check_writable
from core.store.location import PROBE_TIMEOUT_S


def test_a_bucket_out_of_reach_fails_in_seconds_and_quietly(capfd):
    """No network or no credentials: gcsfs would retry for about a minute, printing a
    traceback for each attempt; the write probe gives up after PROBE_TIMEOUT_S (its answer
    says so: proof that it did not wait for gcsfs's retries, on a machine however busy)."""
    with pytest.raises(CheckpointError, match=r"^cannot write checkpoints to gs://zoo-nosuch"
                       rf".*: no answer in {PROBE_TIMEOUT_S} s; check the network"):
        check_writable("gs://zoo-nosuch-bucket-1f3a/run")
    assert "Traceback" not in capfd.readouterr().err


def test_a_missing_location_is_made_and_removed_again(tmp_path):
    check_writable(tmp_path / "runs" / "a" / "checkpoints")
    assert list(tmp_path.iterdir()) == []  # no empty folders left behind


def test_the_probe_removes_only_what_it_made(tmp_path, monkeypatch):
    """Another start makes its files in the same new folder while this probe runs: they stay
    (the probe removes its own file, then only empty folders it made)."""
    from core.store import location as location_lib

    real_write = location_lib.Store.write_bytes

    def write_then_another_start_writes(store, name, data):
        real_write(store, name, data)
        (tmp_path / "runs" / "a" / ".lock").write_text("{}")

    monkeypatch.setattr(location_lib.Store, "write_bytes", write_then_another_start_writes)
    check_writable(tmp_path / "runs" / "a" / "checkpoints")
    assert [p.name for p in (tmp_path / "runs" / "a").iterdir()] == [".lock"]
