"""core/run_home.RunHome: a run folder in a bucket is worked in a local copy that starts
from what the run continues and pushes back only what changed (file:// stands in for gs://)."""

import os

import pytest

from core.store.run_home import CONTINUED, RunHome


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "disk"))
    return RunHome(f"file://{tmp_path}/bucket/run/")


def test_a_url_is_worked_in_a_local_copy_named_by_it(home, tmp_path):
    assert home.in_bucket and home.local.parent == tmp_path / "disk" / "runs"
    assert home.local.name.startswith("run-")
    assert home.path("checkpoints") == f"file://{tmp_path}/bucket/run/checkpoints"
    local = RunHome("runs/x")
    assert not local.in_bucket and local.remote is None and str(local.local) == "runs/x"
    assert local.path("checkpoints") == "runs/x/checkpoints"


def test_push_uploads_what_changed_and_never_the_lock(home, tmp_path):
    bucket = tmp_path / "bucket" / "run"
    home.local.mkdir(parents=True)
    (home.local / "metrics.jsonl").write_text('{"step": 1}\n')
    (home.local / "tb").mkdir()
    (home.local / "tb" / "events").write_bytes(b"e1")
    (home.local / ".lock").write_text("{}")
    home.push()
    assert sorted(p.relative_to(bucket).as_posix() for p in bucket.rglob("*") if p.is_file()) \
        == ["metrics.jsonl", "tb/events"]

    (bucket / "tb" / "events").write_bytes(b"changed in the bucket")
    with (home.local / "metrics.jsonl").open("a") as metrics:
        metrics.write('{"step": 2}\n')
    home.push(throttled=True)  # too soon after the last push: nothing
    assert (bucket / "metrics.jsonl").read_text() == '{"step": 1}\n'
    home.push()
    assert (bucket / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    assert (bucket / "tb" / "events").read_bytes() == b"changed in the bucket"  # unchanged here


def test_pull_makes_the_copy_anew_from_what_the_run_continues(home, tmp_path):
    bucket = tmp_path / "bucket" / "run"
    (bucket / "tb").mkdir(parents=True)
    for name in CONTINUED:
        (bucket / name).write_text(name)
    (bucket / "tb" / "events").write_text("old events stay in the bucket")
    home.local.mkdir(parents=True)
    (home.local / "stale.txt").write_text("from an earlier VM's run")
    (home.local / ".lock").write_text("held by the caller")
    home.pull()
    assert sorted(os.listdir(home.local)) == sorted([*CONTINUED, ".lock"])
    assert (home.local / "run-id").read_text() == "run-id"
    home.push()  # what was pulled is not uploaded again
    assert (bucket / "tb" / "events").read_text() == "old events stay in the bucket"


def test_forget_removes_the_bucket_folder_only_when_asked(home, tmp_path):
    bucket = tmp_path / "bucket" / "run"
    home.local.mkdir(parents=True)
    (home.local / "run-id").write_text("abc")
    home.push()
    home.forget(remote=False)
    assert not home.local.exists() and (bucket / "run-id").exists()
    home.forget(remote=True)
    assert not bucket.exists()


def test_a_file_gone_or_an_upload_refused_does_not_stop_the_push(home, tmp_path, capsys):
    bucket = tmp_path / "bucket" / "run"
    home.local.mkdir(parents=True)
    (home.local / "wandb").mkdir()
    (home.local / "wandb" / "debug.log").symlink_to(home.local / "gone")  # dangling
    (home.local / "metrics.jsonl").write_text('{"step": 1}\n')
    bucket.parent.mkdir(parents=True)
    bucket.write_text("a file where the run folder should be")  # every upload refused
    home.push()
    assert "warning: could not upload metrics.jsonl" in capsys.readouterr().err
    bucket.unlink()
    home.push()  # refused ones go at the next push
    assert (bucket / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert not (bucket / "wandb" / "debug.log").exists()
