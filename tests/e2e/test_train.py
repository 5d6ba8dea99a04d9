"""`zoo train` end to end on XLA:CPU: outputs, resume after SIGKILL, SIGTERM, damage and
changed settings, one writer per run folder (bad input: test_bad_inputs.py)."""

import json
import math
import os
import shutil
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from core import goodput
from tests.support.runs import (
    forked_zoo,
    kill_after_first_checkpoint_then_rerun,
    losses,
    popen_zoo,
    side_by_side,
    zoo,
    zoo_here,
)

# A smaller llama-tiny so each run takes seconds.
SMALL = ["model.num_hidden_layers=2", "seq_len=64", "log_every=1", "optim.lr=1e-3"]


def checkpoints(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").glob("step-*"))


@pytest.fixture(scope="module")
def two_starts(tmp_path_factory):
    """An uninterrupted 12-step run on 4 devices (checkpoint every 4 steps), started twice
    at the same moment into a folder that does not exist yet: (run folder, the start that
    trained, the other one)."""
    out = tmp_path_factory.mktemp("ref") / "run"
    args = ("train", "llama-tiny", "--tpu", "cpu-4", "--steps", "12", "--out", str(out),
            "checkpoint_every=4", *SMALL)
    with ThreadPoolExecutor(max_workers=2) as pool:
        trained, refused = sorted(pool.map(lambda _: zoo(*args), range(2)),
                                  key=lambda result: result.returncode)
    assert trained.returncode == 0, trained.stderr[-3000:]
    return out, trained, refused


@pytest.fixture(scope="module")
def reference_run(two_starts):
    return two_starts[:2]


def test_of_two_identical_starts_one_trains_the_other_is_refused_naming_the_lock(two_starts):
    """Neither start's checks remove what the other made (the write probe removes only what
    it made; the lock is linked into place whole), so the winner's run is intact."""
    out, _, refused = two_starts
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    assert f"(lock {out}/.lock)" in refused.stderr.strip().splitlines()[-1]


def test_run_writes_metrics_config_and_checkpoints(reference_run):
    out, result = reference_run
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 13))
    for key in ("step", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "mfu",
                "compiles", "goodput"):
        assert all(key in r for r in records), key
    # the run's productive share so far: small at step 1 (start-up, compile), then growing
    assert 0 <= records[0]["goodput"] < records[-1]["goodput"] < 1
    assert records[-1]["loss"] < records[0]["loss"] - 0.5
    assert records[-1]["compiles"] == 1  # AdamW's state exists before the first trace
    assert (out / "config.yaml").is_file()
    assert checkpoints(out) == ["step-00000004", "step-00000008", "step-00000012"]
    assert "done: steps 1-12" in result.stdout and "sample: " in result.stdout
    assert "step 1: the train step compiled in" in result.stdout + result.stderr
    assert "1 compile (" in result.stdout  # the summary gives each compile's seconds


def test_sigkill_then_rerun_resumes_with_identical_losses(reference_run, tmp_path):
    out = tmp_path / "run"
    args = ["llama-tiny", "--tpu", "cpu-4", "--steps", "12", "checkpoint_every=4", *SMALL]
    resumed, rerun_seconds = kill_after_first_checkpoint_then_rerun(args, out, first=4)
    reference = losses(reference_run[0])
    assert losses(out) == reference  # bit-identical: same graphs, same restored state
    assert_goodput_counts_the_restart(out, resumed.stdout, rerun_seconds)


def assert_goodput_counts_the_restart(out: Path, printed: str, rerun_seconds: float):
    """The account of the killed and the resumed attempt: the steps done again after the
    checkpoint at 4, the restart's cost, every second of the rerun accounted for."""
    summary = goodput.run_account(str(out))
    killed, rerun = summary["attempts"]
    assert rerun["resumed_from"] == 4 and rerun["reached"] == 12
    assert killed["lost_steps"] == killed["reached"] - 4 == summary["lost_steps"]
    assert (killed["seconds"]["wasted_progress_from_disruption"] > 0) == (killed["lost_steps"] > 0)
    restart = rerun["seconds"]
    assert restart["training_prep"] > 0 and restart["program_startup"] > 0
    assert restart["unproductive_checkpoint_restore_time"] > 0
    # the rerun's attempt lies inside its process's life, timed from outside (from the
    # process's creation: its start-up is counted above; no bound on the teardown after the
    # heartbeat at exit, which a busy machine stretches)
    assert 0 < rerun["wall_s"] <= rerun_seconds
    assert restart["other"] < 0.1 * rerun["wall_s"], restart  # measured, not left over
    assert sum(summary["seconds"].values()) == pytest.approx(summary["wall_s"], rel=0.02)
    assert f"{summary['lost_steps']} step(s) done again" in printed
    assert "goodput " in printed


@pytest.mark.slow  # the default suite covers this with two hosts: tests/e2e/test_hosts.py
def test_sigterm_saves_and_exits_cleanly(tmp_path):
    out = tmp_path / "run"
    proc = popen_zoo("train", "llama-tiny", "--tpu", "cpu-1", "--steps", "500", "--out",
                     str(out), "checkpoint_every=1000", *SMALL)
    deadline = time.time() + 300
    while not (out / "metrics.jsonl").exists() or len(losses(out)) < 3:
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    log = "".join(proc.communicate(timeout=300))
    assert proc.returncode == 0, log[-2000:]
    assert "SIGTERM: saved step" in log
    saved = checkpoints(out)
    assert len(saved) == 1 and int(saved[0].split("-")[1]) >= 3


@pytest.mark.slow  # by default: custom optimizers in tests/unit/test_bad_config_files.py, offline
# W&B in tests/e2e/test_hosts.py and test_run_in_bucket.py
def test_custom_optimizer_metrics_reach_jsonl_and_offline_wandb(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "run"
    result = zoo("train", "llama-tiny", "--tpu", "cpu-1", "--steps", "3", "--out", str(out),
                 "optim.name=tests.support.custom_optim:SGDWithUpdateNorm",
                 "data.source=synthetic", "wandb.project=zoo-test", *SMALL)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["update_norm"] > 0 for r in records)
    assert list((out / "wandb").glob("offline-run-*")), "no key: wandb must log offline"


@pytest.mark.slow  # by default a profile is captured for TensorBoard by tests/e2e/test_bench.py
def test_validation_tensorboard_and_a_profile_window(tmp_path):
    out = tmp_path / "run"
    result = zoo("train", "llama-tiny", "--tpu", "cpu-1", "--steps", "8", "--out", str(out),
                 "eval_every=4", "eval_rows=8", "checkpoint_every=4", "profile.start_step=3",
                 "profile.steps=2", *SMALL)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    val = {r["step"]: r for r in records if "val_loss" in r}
    assert sorted(val) == [4, 8] and val[8]["val_loss"] < val[4]["val_loss"]
    assert val[8]["val_perplexity"] == pytest.approx(math.exp(val[8]["val_loss"]))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tb")).Reload()
    assert [e.step for e in events.Scalars("loss")] == list(range(1, 9))
    assert [e.step for e in events.Scalars("val_loss")] == [4, 8]
    assert "profile of steps 3-4" in result.stdout + result.stderr
    (trace,) = (out / "profile").rglob("*.xplane.pb")
    assert b"checkpoint" in trace.read_bytes()  # the named region around step 4's save


def test_models_lists_every_size_with_parameter_count():
    result = zoo_here("models")
    assert result.exit_code == 0
    lines = dict(line.split(None, 1) for line in result.output.strip().splitlines())
    from zoo.registry import model_names

    assert set(lines) == set(model_names())
    assert lines["llama-1b"].startswith("1,235.8 M")  # Llama 3.2 1B: 1.24B parameters
    assert lines["vit-b16"].startswith("86.6 M")  # ViT-B/16, ImageNet-1k head
    assert lines["vit-10b"].startswith("10,077.9 M")


def test_generate_from_a_run(reference_run):
    result = zoo_here("generate", str(reference_run[0]), "--prompt", "The",
                      "--max-new-tokens", "5", "--host")  # in this process: no devices
    assert result.exit_code == 0, result.output[-2000:]
    assert result.output.startswith("The")


# two more runs each; by default grad_accum's config checks run (test_bad_inputs), and the
# LoRA runs of tests/e2e/conftest.py accumulate 2 micro-batches under remat=scan
@pytest.mark.slow
@pytest.mark.parametrize("remat", ["none", "scan", "checkpoint"])
def test_grad_accumulation_matches_one_big_batch(tmp_path, remat):
    """torch_xla's micro-batch loop computed a wrong loss around a scan and refused a
    checkpoint; under those presets the micro-batches are unrolled (core/engine.py)."""
    side_by_side([("train", "llama-tiny", "--tpu", "cpu-1", "--steps", "3", "--out",
                   str(tmp_path / f"accum{accum}"), f"grad_accum={accum}", f"remat={remat}",
                   "data.source=synthetic", *SMALL) for accum in (1, 2)])
    single, accumulated = losses(tmp_path / "accum1"), losses(tmp_path / "accum2")
    assert single.keys() == accumulated.keys() == {1, 2, 3}
    for step, loss in single.items():
        assert accumulated[step] == pytest.approx(loss, rel=1e-5), step


@pytest.mark.slow  # by default tests/unit/test_precision.py follows bf16 against fp32
def test_bf16_training_runs_and_learns(tmp_path):
    out = tmp_path / "run"
    result = zoo("train", "llama-tiny", "--tpu", "cpu-1", "--steps", "6", "--out", str(out),
                 "precision=bf16", *SMALL)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "; bf16; MFU against" in result.stderr + result.stdout
    steps = losses(out)
    assert steps[6] < steps[1]


def test_init_from_a_hugging_face_directory_with_its_tokenizer_and_no_model_name(tmp_path):
    import transformers

    from core.data import load_tokenizer
    from zoo.llama.config import LlamaConfig

    hf_dir = tmp_path / "hf"
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    transformers.LlamaForCausalLM(config.to_hf()).save_pretrained(hf_dir)
    load_tokenizer("default").save_pretrained(hf_dir)
    out = tmp_path / "run"
    result = zoo("train", "--tpu", "cpu-1", "--steps", "2", "--out", str(out),
                 "--init-from", str(hf_dir), "seq_len=64", "log_every=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"init: weights of {hf_dir} (LlamaForCausalLM)" in result.stdout
    # the family from config.json, named alone (the architecture is no zoo size's); the HF
    # architecture, not llama-tiny's; its own tokenizer
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["model_name"] == "llama"
    assert (saved["model"]["hidden_size"], saved["model"]["num_hidden_layers"]) == (64, 2)
    assert saved["data"]["tokenizer"] == str(hf_dir)


def test_resume_refuses_other_settings_and_allows_harmless_ones(reference_run, tmp_path):
    """The three resumes are forks of one process that has imported the CLI (none trains:
    the run has its 12 steps), side by side; the forced one on a copy of its own, so the
    refusal's folder shows that the refusal wrote nothing."""
    run, forced_run = tmp_path / "run", tmp_path / "forced"
    for copy in (run, forced_run):
        shutil.copytree(reference_run[0], copy)
    base = ["train", "llama-tiny", "--tpu", "cpu-4", "--steps", "12", "checkpoint_every=4",
            *SMALL]
    changed, harmless, forced = forked_zoo(  # the refusal takes no lock: side by side
        [[*base, "--out", str(run), "optim.lr=5e-3", "seq_len=32"],
         [*base, "--out", str(run), "keep_checkpoints=5"],
         [*base, "--out", str(forced_run), "optim.lr=5e-3", "--force-resume"]])
    assert changed["returncode"] != 0 and len(changed["stderr"].strip().splitlines()) == 1
    assert "other settings (optim.lr: 0.001 -> 0.005, seq_len: 64 -> 32)" in changed["stderr"]
    assert "--force-resume" in changed["stderr"] and "Traceback" not in changed["stderr"]
    assert harmless["returncode"] == 0 and "nothing to do" in harmless["stdout"], harmless
    config = yaml.safe_load((run / "config.yaml").read_text())  # the refusal wrote nothing
    assert (config["optim"]["lr"], config["seq_len"]) == (0.001, 64)
    assert forced["returncode"] == 0 and "nothing to do" in forced["stdout"], forced


@pytest.mark.slow  # by default: the two identical starts above, and tests/unit/test_run_lock.py
def test_a_second_run_in_a_busy_folder_exits_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    holder = {"host": socket.gethostname(), "pid": os.getpid()}  # alive: this test
    (run / ".lock").write_text(json.dumps(holder))
    result = zoo("train", "llama-tiny", "--tpu", "cpu-1", "--steps", "2", "--out", str(run),
                 *SMALL)
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1
    assert f"is in use by pid {os.getpid()} on host {holder['host']}" in result.stderr
    assert sorted(p.name for p in run.iterdir()) == [".lock"]  # nothing written


@pytest.mark.slow  # by default: set aside and restored in tests/multidevice/test_checkpoint.py,
# refused by export in tests/e2e/test_damaged_files.py
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_run_resumes_exactly(
        reference_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(reference_run[0], run)
    newest = run / "checkpoints" / "step-00000012"
    shard = sorted(newest.glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:100])  # a truncated copy

    export = zoo("export", str(newest), str(tmp_path / "hf"))
    assert export.returncode != 0 and len(export.stderr.strip().splitlines()) == 1
    assert f"is damaged: {shard.name} is 100 bytes" in export.stderr
    assert not (tmp_path / "hf").exists()

    rerun = zoo("train", "llama-tiny", "--tpu", "cpu-4", "--steps", "12", "--out", str(run),
                "checkpoint_every=4", *SMALL)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "step-00000012 is damaged" in rerun.stderr and "resuming from step 8" in rerun.stdout
    assert (run / "checkpoints" / "step-00000012.damaged" / shard.name).is_file()  # kept
    assert losses(run) == losses(reference_run[0])  # steps 9-12 again, identical


def test_a_copied_run_folder_reads_its_own_checkpoints(reference_run, tmp_path):
    """The config's saved `out:` names the original folder; a copy (or a moved run) must
    export and sample its own checkpoints, not the original's."""
    from zoo.app.saved_run import checkpoint_of, load_run

    copy = tmp_path / "copy"
    shutil.copytree(reference_run[0], copy)
    assert load_run(copy)[1].local == copy
    assert checkpoint_of(copy) == str(copy / "checkpoints" / "step-00000012")
