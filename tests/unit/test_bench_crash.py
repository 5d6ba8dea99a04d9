"""The harness against a worker that crashes: a crash is run once more and said so, a
failed entry leaves the others' results and its worker's whole log in a file it names.
The worker is tests/support/bench_fake_worker.py, a process of its own as the real one."""

import json

import pytest

from benchmarks import harness, worker_process
from benchmarks.bench import BenchRequest, bench
from benchmarks.suite import Entry
from core.errors import UserError


@pytest.fixture
def fake_worker(tmp_path, monkeypatch):
    monkeypatch.setattr(worker_process, "WORKER", "tests.support.bench_fake_worker")
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("ZOO_TEST_BENCH_MARKERS", str(markers))


def entries(*names):
    return [Entry(name=name, model="llama-tiny") for name in names]


def test_a_crash_is_rerun_and_a_failure_keeps_the_other_entries(fake_worker, tmp_path,
                                                                 capsys):
    logs = tmp_path / "logs"
    results = harness.run_suite(entries("ok", "crash-once", "crash-always", "error"),
                                steps=3, compare=None, mfu=False, profile_dir=None,
                                log_dir=logs)
    assert [r["name"] for r in results["records"]] == ["ok", "crash-once"]
    assert results["records"][0]["crashed_logs"] == []
    rerun_log = logs / "crash-once-zoo-attempt1.log"
    assert results["records"][1]["crashed_logs"] == [str(rerun_log)]
    said = capsys.readouterr()
    assert (f"crash-once (zoo): the worker crashed (killed by SIGSEGV); its log: {rerun_log}; "
            "running the entry once more") in said.out + said.err
    failed = {f["name"]: f for f in results["failed"]}
    assert sorted(failed) == ["crash-always", "error"]
    crash_log = logs / "crash-always-zoo-attempt2.log"
    assert failed["crash-always"]["log"] == str(crash_log)
    assert failed["crash-always"]["error"] == (
        f"benchmark entry crash-always (zoo) failed: killed by SIGSEGV; the worker's whole "
        f"log: {crash_log}")
    whole = crash_log.read_text()  # the whole log, not its last line
    assert "first line of crash-always's log" in whole and "progress line 49" in whole
    assert "exit status -11 (killed by SIGSEGV)" in whole
    # an error exit is not a crash: not run again, its last line named
    assert not (logs / "error-zoo-attempt2.log").exists()
    assert "failed: Error: the planted failure; the worker's whole log:" in failed["error"]["error"]
    assert "progress line 0" in (logs / "error-zoo-attempt1.log").read_text()


def test_zoo_bench_writes_the_others_results_then_fails_naming_the_log(fake_worker, tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text("- {name: ok, model: llama-tiny}\n- {name: crash-always, model: llama-tiny}\n")
    out = tmp_path / "out"
    with pytest.raises(UserError) as error:
        bench(BenchRequest(suite=str(suite), steps=3, out=str(out)), lambda *a, **k: None)
    log = out / "logs" / "crash-always-zoo-attempt2.log"
    assert str(error.value) == (
        f"1 benchmark entry failed (the others' results are in {out}): benchmark entry "
        f"crash-always (zoo) failed: killed by SIGSEGV; the worker's whole log: {log}")
    written = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in written["records"]] == ["ok"]
    assert f"- crash-always (zoo): see {log}" in (out / "results.md").read_text()
    assert log.is_file()


def test_every_entry_failing_is_one_error(fake_worker, tmp_path):
    with pytest.raises(UserError, match="^every benchmark entry failed: benchmark entry error"):
        harness.run_suite(entries("error"), steps=3, compare=None, mfu=False,
                          profile_dir=None, log_dir=tmp_path)
