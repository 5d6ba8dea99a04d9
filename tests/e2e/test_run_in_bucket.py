"""A run whose `--out` is a bucket (file:// takes gs://'s code path: whole-object writes)
survives the loss of its VM: the rerun, with nothing of the first VM's disk left, continues
the same metrics history and the same W&B run from the bucket's checkpoint, and export and
eval read the run where it is."""

import json
import shutil

import pytest

from tests.support.runs import zoo, zoo_here

ARGS = ["llama-tiny", "checkpoint_every=3", "log_every=2", "wandb.project=zoo-tests",
        "wandb.mode=offline", "model.num_hidden_layers=1", "seq_len=64", "global_batch_size=4"]


def test_a_run_in_a_bucket_continues_after_its_vm_is_recreated(tmp_path, monkeypatch):
    bucket, disk = tmp_path / "bucket", tmp_path / "disk"
    monkeypatch.setenv("ZOO_CACHE", str(disk))  # the VM's disk: its local copy of the run
    out = f"file://{bucket}/run"
    first = zoo("train", *ARGS, "--steps", "6", "--out", out)
    assert first.returncode == 0, first.stderr[-3000:]
    run = bucket / "run"
    wandb_id = (run / "wandb-run-id").read_text()

    shutil.rmtree(disk)  # the VM is recreated: only the bucket is left
    second = zoo("train", *ARGS, "--steps", "9", "--out", out)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resuming from step 6 ({out}/checkpoints)" in second.stdout

    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 4, 6, 7, 8, 9]  # one history: the first run's, then the rerun's
    assert (run / "wandb-run-id").read_text() == wandb_id
    offline_runs = sorted(p.name for p in (run / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 2 and all(n.endswith(wandb_id.strip()) for n in offline_runs)
    assert len(list((run / "tb").glob("events.out.tfevents.*"))) == 2
    assert not (run / ".lock").exists()
    timeline = tmp_path / "goodput.png"
    accounted = zoo_here("goodput", out, "--plot", str(timeline))
    assert accounted.exit_code == 0, accounted.output
    assert "over 2 attempt(s); 0 step(s) done again" in accounted.output  # resumed at 6 of 6
    assert timeline.read_bytes()[:4] == b"\x89PNG"

    # export needs no devices of its own: in this process (click's runner); eval stays a
    # process of its own (lm-eval's accelerate would start XLA in this one)
    exported = zoo_here("export", out, str(tmp_path / "hf"))
    assert exported.exit_code == 0, exported.output[-3000:]
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    shutil.rmtree(disk)  # eval on yet another VM: exports into its own copy, then the bucket
    scored = zoo("eval", out, "--tasks", "arc_easy_sample", "--limit", "4")
    assert scored.returncode == 0, scored.stderr[-3000:]
    # a partial score (--limit) goes beside the run's full one, never over it
    assert f"wrote {out}/eval_results-limit4.json" in scored.stdout
    assert json.loads((run / "eval_results-limit4.json").read_text())["checkpoint"] == out
    assert (run / "hf" / "step-00000009" / "model.safetensors").is_file()


@pytest.mark.slow  # by default a failed start leaves no local folder (test_bad_inputs)
def test_a_failed_start_in_a_bucket_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "disk"))
    out = f"file://{tmp_path}/bucket/run"
    failed = zoo("train", *ARGS, "--steps", "2", "--out", out, "data.source=synthetic",
                 "model.initializer_range=1e30")  # its first step is not finite
    assert "step 1: grad_norm nan" in failed.stderr
    assert not (tmp_path / "bucket" / "run").exists()
    assert list((tmp_path / "disk" / "runs").iterdir()) == []
