"""`zoo plan --search` end to end: the space pruned, the survivors compiled by libtpu for the
slice in worker processes, the winner ranked by projected throughput, and the winner's
printed overrides trained by `zoo train` (on virtual devices: the same mesh, presets and
batch). The whole llama-tiny search (5 compiles) and the llama-8b search against the
hand-picked MaxText-comparison config are slow; the default suite compiles one candidate."""

import json
import signal
import time

import psutil
import pytest

from benchmarks.plan.analytic import make_plan
from benchmarks.plan.search import projected_mfu
from core import topology
from tests.support.runs import popen_zoo, zoo
from zoo.app.run import resolve_run


def search(*args, timeout):
    result = zoo("plan", *args, "--search", "--json", timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "compiling" in result.stderr  # the progress bar, beside the JSON
    return json.loads(result.stdout)


@pytest.mark.slow  # 4-7 minutes on 2 cores: 5 compiles; the default suite's 20 minutes
def test_llama_tiny_search_on_v5p_8_and_its_winner_trains(tmp_path):
    # one compile process: on 2 cores the suite's other worker holds the second
    record = search("llama-tiny", "--tpu", "v5p-8", "--jobs", "1", timeout=900)
    space, ranked = record["space"], record["ranked"]
    assert space["considered"] == 315 and space["compiled"] == len(ranked) + len(
        record["not_fitting"])
    # most of the space is never compiled: the estimate and the compiled results rule it out
    assert space["compiled"] <= 8 < space["ruled_out_by_compiled"]
    mfus = [row["mfu"] for row in ranked]
    assert mfus == sorted(mfus, reverse=True) and 0 < mfus[0] <= 1
    winner = ranked[0]
    assert winner["status"] == "fits" and winner["overrides"] == record["winner_overrides"]
    assert record["train_command"].endswith(record["winner_overrides"])
    trained = zoo("train", "llama-tiny", "--tpu", "cpu-4", "--steps", "2",
                  *record["winner_overrides"].split(), "--out", str(tmp_path / "run"),
                  timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert f"global_batch_size={winner['batch_per_device'] * 4}" in record["winner_overrides"]
    assert "done: steps 1-2" in trained.stdout


def test_the_keys_given_reach_the_compiled_program_and_the_winner_trains(tmp_path):
    """seq_len is not searched: the compile processes must trace it as given; the printed
    `zoo train` line (keys given, then the winner's) trains on virtual devices."""
    given = ["seq_len=128", "sharding=fsdp", "remat=none", "mesh.data=1", "mesh.fsdp=4"]
    record = search("llama-tiny", "--tpu", "v5p-8", "--max-batch", "1", *given, timeout=600)
    (row,) = record["ranked"]
    planned = make_plan(resolve_run("llama-tiny", ["tpu=v5p-8", "seq_len=128",
                                                   "global_batch_size=4"]), 0.5)
    assert row["model_flops_per_chip"] == pytest.approx(planned.flops_per_step / 4)
    command = record["train_command"].split()
    assert command[:5] == ["zoo", "train", "llama-tiny", "--tpu", "v5p-8"]
    assert command[5:] == [*given, "global_batch_size=4"]
    trained = zoo("train", "llama-tiny", "--tpu", "cpu-4", "--steps", "2", *command[5:],
                  "--out", str(tmp_path / "run"), timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "done: steps 1-2" in trained.stdout


def test_a_budget_too_small_for_one_compile_is_one_line():
    result = zoo("plan", "llama-tiny", "--tpu", "v5p-8", "--search", "--budget", "0.02",
                 "sharding=fsdp", "remat=none", "global_batch_size=16", "mesh.fsdp=4",
                 timeout=300)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert last.startswith("Error: --budget 0.02 min ran out before the first compile of "
                           "llama-tiny for v5p-8 finished; raise --budget"), last


def test_a_cpu_slice_is_refused_in_one_line():
    result = zoo("plan", "llama-tiny", "--tpu", "cpu-4", "--search", timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "Error: --search (it compiles each configuration with the TPU compiler) needs a v4, "
        "v5p, v5e or v6e slice, not cpu-4")


def test_a_sigterm_ends_the_search_and_its_compile_processes_at_once():
    """The workers run in sessions of their own (a timed-out compile is killed with its
    children): the search must stop them itself, not leave them to finish their compile."""
    search = popen_zoo("plan", "llama-tiny", "--tpu", "v5p-8", "--search", "--jobs", "1",
                       "sharding=fsdp", "remat=none", "global_batch_size=16", "mesh.fsdp=4")
    parent, deadline = psutil.Process(search.pid), time.monotonic() + 120
    while not (workers := parent.children()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert workers, search.communicate()[1][-3000:]
    time.sleep(2)  # importing torch_xla, or compiling: either way busy, not reading stdin
    search.send_signal(signal.SIGTERM)
    _, stderr = search.communicate(timeout=10)
    assert search.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "Traceback" not in stderr
    gone, alive = psutil.wait_procs(workers, timeout=2)
    assert not alive, [p.cmdline() for p in alive]


@pytest.mark.slow
def test_llama_8b_search_on_v5p_128_beats_the_hand_picked_config():
    record = search("llama-8b", "--tpu", "v5p-128", "--budget", "30", "seq_len=8192",
                    timeout=40 * 60)
    hand_picked = zoo("plan", "llama-8b", "--tpu", "v5p-128", "--compile", "--json",
                      "seq_len=8192", "global_batch_size=128", "remat=scan_checkpoint",
                      timeout=20 * 60)
    assert hand_picked.returncode == 0, hand_picked.stderr[-3000:]
    reference = projected_mfu(json.loads(hand_picked.stdout), topology.parse("v5p-128"))
    winner = record["ranked"][0]
    hand_picked_flops = json.loads(hand_picked.stdout)["flops_per_chip"]["analytic_model"]
    # the search compiled seq_len=8192 as given: model FLOPs scale with its batch alone
    assert winner["model_flops_per_chip"] == pytest.approx(
        hand_picked_flops * winner["batch_per_device"] / 2)
    assert winner["mfu"] >= reference
