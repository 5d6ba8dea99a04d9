"""The CPU peak a training run's MFU is measured against: measured once per host, dtype and
device count, remembered for a day, measured again when stale or damaged."""

import json
import time

import pytest

from core.backends.xla import cpu_peak


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """ZOO_CACHE in tmp_path; every real measurement replaced by a counted 1e9 FLOP/s."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    calls = []

    class Measurement:
        flops = 1e9

    def calibrate(dtype_name, **_):
        calls.append(dtype_name)
        return Measurement()

    monkeypatch.setattr(cpu_peak, "calibrate_cpu_peak", calibrate)
    return calls


def test_measured_once_then_remembered_per_dtype_and_devices(measured, tmp_path):
    first = cpu_peak.remembered_cpu_peak("float32", 4)
    assert cpu_peak.remembered_cpu_peak("float32", 4) == first
    cpu_peak.remembered_cpu_peak("bfloat16", 4)
    cpu_peak.remembered_cpu_peak("float32", 8)
    assert measured == ["float32", "bfloat16", "float32"]
    assert len(json.loads((tmp_path / cpu_peak.CACHE_FILE).read_text())) == 3
    assert not list(tmp_path.glob("*.tmp"))


def test_a_stale_or_damaged_memory_is_measured_again(measured, tmp_path):
    cpu_peak.remembered_cpu_peak("float32", 1)
    path = tmp_path / cpu_peak.CACHE_FILE
    (key, entry), = json.loads(path.read_text()).items()
    entry["measured_at"] = time.time() - cpu_peak.MAX_AGE_S - 1
    path.write_text(json.dumps({key: entry}))
    cpu_peak.remembered_cpu_peak("float32", 1)
    path.write_text("{not json")
    flops, measured_at = cpu_peak.remembered_cpu_peak("float32", 1)
    assert measured == ["float32"] * 3
    assert flops == 1e9 and time.time() - measured_at < 60
    assert json.loads(path.read_text())[key]["flops"] == 1e9


def test_an_unwritable_cache_only_means_measuring_again(measured, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ZOO_CACHE", str(blocker / "cache"))  # a folder inside a file
    assert cpu_peak.remembered_cpu_peak("float32", 1)[0] == 1e9
    assert cpu_peak.remembered_cpu_peak("float32", 1)[0] == 1e9
    assert measured == ["float32", "float32"]
