"""Sharded checkpoints: exact restore, bit-identical resume, resharding between 1 and 4
devices, atomic visibility, keep-N, and the torch_xla-free consolidated weights.

tests/support/checkpoint_worker.py runs once per device count (both in parallel); after its
own save/restore scenarios it restores the other worker's checkpoint (phase 2).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from core.errors import UserError
from core.store.checkpoint import Checkpointer
from core.store.checkpoint_reader import load_checkpoint
from core.store.location import Store
from core.store.manifest import write_manifest
from tests.support.checkpoint_worker import BATCH, RESTORE_STEP, STEPS
from tests.support.paths import ROOT
from tests.support.xla_harness import UNOPTIMISED_CODE, xla_cpu_env

DEVICE_COUNTS = (1, 4)
OTHER = {1: 4, 4: 1}


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("checkpoint")
    procs = {}
    for n in DEVICE_COUNTS:
        log = open(out / f"log-{n}.txt", "w")  # closed after the worker exits
        procs[n] = (
            subprocess.Popen(
                [sys.executable, "-m", "tests.support.checkpoint_worker", str(out)],
                cwd=ROOT,
                env=xla_cpu_env(n, UNOPTIMISED_CODE),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            ),
            log,
        )

    def failure(n):
        return f"worker on {n} devices failed:\n{(out / f'log-{n}.txt').read_text()[-3000:]}"

    for n, (proc, _) in procs.items():
        assert proc.stdout.readline().strip() == "ready", failure(n)
    for n, (proc, log) in procs.items():
        proc.communicate(f"{out / f'run-{OTHER[n]}'}\n", timeout=600)
        log.close()
        assert proc.returncode == 0, failure(n)
    return {
        "out": out,
        **{n: torch.load(out / f"phase1-{n}.pt", weights_only=False) for n in DEVICE_COUNTS},
        "phase2": {
            n: torch.load(out / f"phase2-{n}.pt", weights_only=False) for n in DEVICE_COUNTS
        },
    }


def assert_same_state(restored: dict, saved: dict):
    """Bit-exact params, optimizer state, LR and scheduler state, and RNG states."""
    assert restored["params"].keys() == saved["params"].keys()
    for name, value in saved["params"].items():
        assert torch.equal(restored["params"][name], value), name
    assert restored["optim"].keys() == saved["optim"].keys()
    for name, state in saved["optim"].items():
        assert restored["optim"][name].keys() == state.keys() == {"step", "exp_avg", "exp_avg_sq"}
        for key, value in state.items():
            got = restored["optim"][name][key]
            assert got.dtype == value.dtype and torch.equal(got, value), (name, key)
    assert restored["lrs"] == saved["lrs"]
    assert restored["scheduler"] == saved["scheduler"]
    assert torch.equal(restored["torch_rng"], saved["torch_rng"])
    assert restored["xla_rng"] == saved["xla_rng"]


@pytest.mark.parametrize("devices", DEVICE_COUNTS)
def test_worker_saw_its_device_count(runs, devices):
    assert runs[devices]["devices"] == devices


@pytest.mark.parametrize("devices", DEVICE_COUNTS)
def test_restore_brings_back_params_optimizer_scheduler_step_and_rng(runs, devices):
    run = runs[devices]
    assert run["info"] == {
        "step": RESTORE_STEP,
        "data_position": RESTORE_STEP * BATCH,
        "extra": {"note": RESTORE_STEP},
    }
    assert_same_state(run["restored"], run["saved"][RESTORE_STEP])


@pytest.mark.parametrize("devices", DEVICE_COUNTS)
def test_training_resumed_from_a_checkpoint_is_bit_identical(runs, devices):
    run = runs[devices]
    assert len(run["resumed"]) == STEPS - RESTORE_STEP
    for resumed, uninterrupted in zip(run["resumed"], run["losses"][RESTORE_STEP:]):
        assert torch.equal(resumed, uninterrupted)


def test_restored_params_and_optimizer_state_keep_their_sharding(runs):
    run = runs[4]
    specs = run["restored"]["param_specs"]
    assert specs == run["fresh_specs"] == run["saved"][RESTORE_STEP]["param_specs"]
    assert specs["embed.weight"] == "{devices=[4,1]0,1,2,3}"
    assert specs["layers.0.norm.weight"] == "{replicated}"
    # exp_avg is built on restore with its parameter's sharding, as a training step does.
    assert run["restored"]["optim_specs"] == run["saved"][RESTORE_STEP]["optim_specs"]
    assert run["restored"]["optim_specs"]["embed.weight"] == specs["embed.weight"]


@pytest.mark.parametrize("devices", DEVICE_COUNTS)
def test_restore_reshards_a_checkpoint_from_another_device_count(runs, devices):
    other = runs[OTHER[devices]]
    result = runs["phase2"][devices]
    assert result["info"]["step"] == RESTORE_STEP
    assert_same_state(result["restored"], other["saved"][RESTORE_STEP])
    assert result["restored"]["param_specs"] == runs[devices]["fresh_specs"]
    # Different device counts reduce in a different order: equal up to fp32 rounding.
    torch.testing.assert_close(
        torch.stack(result["resumed"]), torch.stack(other["losses"][RESTORE_STEP:])
    )


@pytest.mark.parametrize("devices", DEVICE_COUNTS)
def test_only_the_newest_checkpoints_are_kept_and_stale_tmp_folders_removed(runs, devices):
    # keep=2 after saves at steps 2, 4, 6; a crashed save's folder made before the last save.
    assert runs[devices]["folders"] == ["step-00000004", "step-00000006"]


@pytest.mark.parametrize("devices", DEVICE_COUNTS)
def test_a_save_that_crashes_midway_leaves_the_previous_checkpoint_latest(runs, devices):
    after = runs[devices]["after_crash"]
    assert after["folders"] == ["step-00000004", "step-00000006", "step-00000008"]
    assert after["latest"] == STEPS  # step 8 has no manifest: never committed
    assert Checkpointer(runs["out"] / f"run-{devices}").latest_step() == STEPS


def test_load_checkpoint_needs_no_torch_xla_and_gives_full_hf_named_tensors(runs):
    run_dir = runs["out"] / "run-4"
    dest = runs["out"] / "loaded.pt"
    code = (
        "import sys, torch\n"
        "from core.store.checkpoint_reader import load_checkpoint\n"
        f"latest = load_checkpoint({str(run_dir)!r})\n"
        f"older = load_checkpoint({str(run_dir / 'step-00000004')!r})\n"
        f"consolidated = load_checkpoint({str(runs['out'] / 'consolidated-4')!r})\n"
        "assert 'torch_xla' not in sys.modules, 'torch_xla was imported'\n"
        f"torch.save({{'latest': latest, 'older': older, 'consolidated': consolidated}}, "
        f"{str(dest)!r})\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = torch.load(dest)
    # from the shards (the default), and from model.safetensors (consolidate=True)
    assert not list(run_dir.rglob("model.safetensors"))
    assert (runs["out"] / f"consolidated-4/step-{STEPS:08d}/model.safetensors").is_file()
    for key, step in (("latest", STEPS), ("older", RESTORE_STEP), ("consolidated", STEPS)):
        expected = runs[4]["saved"][step]["params"]
        assert sorted(loaded[key]) == sorted(expected)  # state_dict (Hugging Face) names
        for name, value in expected.items():
            assert torch.equal(loaded[key][name], value), name  # full, unsharded tensors


def test_bad_restores_and_saves_are_one_line_errors(runs):
    errors = runs[4]["errors"]
    assert all("\n" not in message for message in errors.values()), errors
    assert errors["empty"].startswith("no complete checkpoint in ")
    assert "'head.weight' has shape [256, 64] in the checkpoint but [257, 64]" in errors["shape"]
    assert "'scale' is in the model but not in the checkpoint" in errors["missing"]
    assert "extra must be JSON-serialisable" in errors["extra"]


def test_checkpoint_folder_bookkeeping_without_a_device(tmp_path):
    assert Checkpointer(tmp_path / "none").latest_step() is None
    for name in ("step-00000003", "step-00000012", "step-00000020", "step-00000001.damaged"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text("{}")
    (tmp_path / "step-00000020" / "manifest.json").unlink()  # a save that never committed
    (tmp_path / "step-00000030").write_text("a file, not a checkpoint folder")
    assert Checkpointer(tmp_path).latest_step() == 12
    with pytest.raises(UserError, match="keep must be at least 1"):
        Checkpointer(tmp_path, keep=0)
    with pytest.raises(UserError, match="neither a checkpoint folder"):
        load_checkpoint(tmp_path / "none")
    # A run folder keeps its checkpoints in checkpoints/; the newest complete one is read.
    weights = {"w": torch.arange(6.0).view(2, 3)}
    for step, scale in ((5, 1.0), (7, 2.0)):
        (tmp_path / "run/checkpoints" / f"step-0000000{step}").mkdir(parents=True)
        save_file(
            {k: v * scale for k, v in weights.items()},
            str(tmp_path / f"run/checkpoints/step-0000000{step}/model.safetensors"),
        )
        write_manifest(Store(tmp_path / f"run/checkpoints/step-0000000{step}"))
    (tmp_path / "run/checkpoints/step-00000009").mkdir()  # uncommitted
    torch.testing.assert_close(load_checkpoint(tmp_path / "run")["w"], weights["w"] * 2)


@pytest.mark.parametrize("devices", DEVICE_COUNTS)
def test_a_save_that_runs_out_of_disk_leaves_the_previous_checkpoint_newest(runs, devices):
    after = runs[devices]["after_no_space"]
    assert "\n" not in after["error"] and "No space left on device" in after["error"]
    assert f"the newest checkpoint is still step {STEPS}" in after["error"]
    assert after["latest"] == STEPS
    assert after["folders"] == ["step-00000004", "step-00000006"]  # partial files removed


@pytest.mark.parametrize("where", ["memory", "async"])
def test_checkpoints_in_an_fsspec_store_and_in_background_restore_the_saved_state(runs, where):
    # memory://: through fsspec, no local disk; async: the next step ran during the write.
    assert_same_state(runs[4]["elsewhere"][where], runs[4]["elsewhere"]["saved"][where])


def damaged_copy(runs, tmp_path) -> Path:
    """run-4 with the newest checkpoint's first shard cut short, as a bad copy leaves it."""
    run = tmp_path / "run"
    shutil.copytree(runs["out"] / "run-4", run)
    shard = sorted((run / f"step-{STEPS:08d}").glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    return run


def test_a_damaged_newest_checkpoint_is_moved_aside_for_the_one_before(runs, tmp_path, capsys):
    run = damaged_copy(runs, tmp_path)
    assert Checkpointer(run).latest_intact_step() == RESTORE_STEP
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and "is damaged (__0_0.distcp is 100 bytes" in line
    assert sorted(p.name for p in run.iterdir()) == [
        f"step-{RESTORE_STEP:08d}", f"step-{STEPS:08d}.damaged"]  # kept, never deleted


def test_reading_a_damaged_checkpoint_names_the_bad_file(runs, tmp_path):
    run = damaged_copy(runs, tmp_path)
    with pytest.raises(UserError, match=r"is damaged: __0_0.distcp is 100 bytes, [\d,]+ when"):
        load_checkpoint(run / f"step-{STEPS:08d}")
