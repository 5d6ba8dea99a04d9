"""The dtensor backend (core/backends/dtensor.py) as a user runs it: `zoo train --backend
dtensor --nproc N` is N gloo processes under torchrun's launcher, and trains the same
run as the xla backend: the same losses, checkpoints either backend restores, and an exact
resume after every process is SIGKILLed. It runs with torch_xla unimportable."""

import json
import os
import subprocess
import time

import psutil
import pytest

from tests.support.paths import ROOT
from tests.support.runs import env, losses, popen_zoo, trained_run, zoo, zoo_command

ARGS = ["llama-tiny", "--steps", "6", "log_every=1", "checkpoint_every=3"]
DTENSOR = ["--backend", "dtensor", "--nproc", "2"]
TOLERANCE = 1e-5  # relative, fp32: the two backends reduce in different orders


@pytest.fixture(scope="module")
def without_torch_xla(tmp_path_factory) -> dict:
    """An environment where torch_xla cannot be imported (as where TorchTPU replaces it)."""
    folder = tmp_path_factory.mktemp("no-torch-xla")
    (folder / "sitecustomize.py").write_text(
        "import sys\nsys.modules['torch_xla'] = None\n")
    return {**env(), "PYTHONPATH": f"{env()['PYTHONPATH']}{os.pathsep}{folder}"}


@pytest.fixture(scope="module")
def dtensor_run(tmp_path_factory, without_torch_xla):
    """The dtensor backend's run, with torch_xla unimportable: it needs none."""
    out = tmp_path_factory.mktemp("dtensor") / "run"
    result = subprocess.run(zoo_command("train", *ARGS, *DTENSOR, "--out", str(out)),
                            env=without_torch_xla, cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def xla_run(tmp_path_factory):
    return trained_run(tmp_path_factory, [*ARGS, "--tpu", "cpu-2"])


def assert_same_losses(ours: dict, theirs: dict, steps) -> None:
    for step in steps:
        assert abs(ours[step] - theirs[step]) <= TOLERANCE * abs(theirs[step]), (
            step, ours[step], theirs[step])


@pytest.mark.slow  # by default dtensor's losses are compared with xla's by tests/e2e/test_sft.py
# (grad_accum, packed rows) and tests/e2e/test_lora.py (adapters, a resumed run)
def test_two_processes_train_as_the_xla_backend(dtensor_run, xla_run):
    assert_same_losses(losses(dtensor_run), losses(xla_run), range(1, 7))
    assert (dtensor_run / "checkpoints" / "step-00000006" / "manifest.json").exists()


@pytest.mark.slow  # by default the two backends' losses agree (above); export reads DCP either way
def test_either_backends_checkpoint_exports_the_same_weights(dtensor_run, xla_run, tmp_path):
    """`zoo export` reads a dtensor run's checkpoint as it reads an xla run's: the two
    Hugging Face folders hold the same tensors (trained to the same losses)."""
    from safetensors.torch import load_file

    exported = {}
    for name, run in (("dtensor", dtensor_run), ("xla", xla_run)):
        result = zoo("export", str(run), str(tmp_path / name))
        assert result.returncode == 0, result.stderr[-3000:]
        exported[name] = load_file(tmp_path / name / "model.safetensors")
    assert exported["dtensor"].keys() == exported["xla"].keys()
    for key, theirs in exported["xla"].items():
        ours = exported["dtensor"][key]
        assert ours.shape == theirs.shape
        assert (ours - theirs).abs().max() <= 1e-4 * max(theirs.abs().max(), 1), key


@pytest.mark.slow
def test_a_dtensor_run_is_scored_by_zoo_eval(dtensor_run, xla_run, tmp_path):
    scores = {}
    for name, run in (("dtensor", dtensor_run), ("xla", xla_run)):
        result = zoo("eval", str(run), "--tasks", "arc_easy_sample", "--limit", "8",
                     "--out", str(tmp_path / name))
        assert result.returncode == 0, result.stderr[-3000:]
        record = json.loads((tmp_path / name / "eval_results.json").read_text())
        scores[name] = record["results"]["arc_easy_sample"]["acc,none"]
    assert scores["dtensor"] == scores["xla"]


@pytest.mark.slow
def test_a_new_family_from_the_template_trains_the_same_on_both_backends(
        tmp_path_factory, without_torch_xla):
    """`zoo new-model`'s family, untouched and outside the tree, on 2 dtensor processes
    (torch_xla unimportable) and on the xla backend: the same losses, no edit elsewhere."""
    folder = tmp_path_factory.mktemp("families")
    made = zoo("new-model", "demo_net", "--dir", str(folder))
    assert made.returncode == 0, made.stderr[-3000:]
    family = {"ZOO_FAMILIES": "demo_net=demo_net.family"}
    outs = {name: tmp_path_factory.mktemp(name) / "run" for name in ("dtensor", "xla")}
    for name, backend, base in (("dtensor", DTENSOR, without_torch_xla),
                                ("xla", ["--tpu", "cpu-2"], env())):
        result = subprocess.run(
            zoo_command("train", "demo_net-tiny", "--steps", "6", "log_every=1", *backend,
                        "--out", str(outs[name])),
            env={**base, **family, "PYTHONPATH": f"{base['PYTHONPATH']}{os.pathsep}{folder}"},
            cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
    assert_same_losses(losses(outs["dtensor"]), losses(outs["xla"]), range(1, 7))


@pytest.mark.slow
def test_either_backend_resumes_the_others_checkpoint(dtensor_run, xla_run, tmp_path):
    """A run checkpointed by one backend goes on on the other, where the first left off."""
    import shutil

    for source, backend in ((xla_run, DTENSOR), (dtensor_run, ["--tpu", "cpu-2"])):
        out = tmp_path / source.parent.name
        shutil.copytree(source, out)
        shutil.rmtree(out / "checkpoints" / "step-00000006")
        (out / "metrics.jsonl").write_text("")
        result = zoo("train", *ARGS, *backend, "--out", str(out))
        assert result.returncode == 0, result.stderr[-3000:]
        assert "resuming from step 3" in result.stdout
        assert_same_losses(losses(out), losses(source), range(4, 7))


@pytest.mark.slow
def test_sigkill_of_every_process_then_rerun_resumes_exactly(tmp_path_factory):
    """As a lost VM: the launcher and its workers (own sessions, as torchrun starts them)
    are killed at once after checkpoint 4 of 10; the rerun takes up from it and ends with
    the uninterrupted run's losses."""
    args = ["llama-tiny", "--steps", "10", "log_every=1", "checkpoint_every=4", *DTENSOR]
    uninterrupted = trained_run(tmp_path_factory, args)
    out = tmp_path_factory.mktemp("killed") / "run"
    proc = popen_zoo("train", *args, "--out", str(out))
    deadline = time.time() + 300
    while not (out / "checkpoints" / "step-00000004" / "manifest.json").exists():
        assert proc.poll() is None and time.time() < deadline, "the run ended before step 4"
        time.sleep(0.2)
    everyone = [proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))]
    for pid in everyone:
        psutil.Process(pid).kill()
    proc.wait()
    resumed = zoo("train", *args, "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step 4" in resumed.stdout
    assert_same_losses(losses(out), losses(uninterrupted), range(1, 11))


@pytest.mark.slow
@pytest.mark.parametrize("model, extra", [
    ("t5-tiny", []), ("vit-tiny", []), ("qwen3-tiny", []), ("gemma3-tiny", []),
    # the load-balancing loss is a product of means over tokens: each process balances its
    # own rows (as data-parallel MoE trainers do), so it is left out here to compare
    ("mixtral-tiny", ["model.router_aux_loss_coef=0"]),
    ("qwen3moe-tiny", ["model.router_aux_loss_coef=0"]),
    ("deepseek3-tiny", []),  # balanced by its routing bias, no loss term
])
def test_every_family_trains_as_on_the_xla_backend(model, extra, tmp_path_factory):
    args = [model, "--steps", "8", "log_every=1", *extra]
    ours = trained_run(tmp_path_factory, [*args, *DTENSOR])
    theirs = trained_run(tmp_path_factory, [*args, "--tpu", "cpu-2"])
    assert_same_losses(losses(ours), losses(theirs), range(1, 9))


@pytest.mark.slow
def test_bench_puts_dtensor_rows_beside_the_xla_rows(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    result = zoo("bench", "--mfu", "--suite", str(suite), "--steps", "3", "--backend",
                 "dtensor", "--out", str(tmp_path / "bench"))
    assert result.returncode == 0, result.stderr[-3000:]
    records = json.loads((tmp_path / "bench" / "results.json").read_text())["records"]
    assert [(r["name"], r["impl"]) for r in records] == [
        ("fsdp-2dev", "zoo"), ("tensor-2dev", "zoo"), ("fsdp-2dev", "dtensor")]
    dtensor = records[-1]
    assert dtensor["devices"] == 2 and 0 < dtensor["mfu"] < 1
    assert "fsdp-2dev: step time zoo / dtensor = " in result.stdout
    assert "tensor-2dev: no dtensor run (mesh.tensor=2: FSDP2 shards" in result.stderr + \
        result.stdout


SUITE = """
- {name: fsdp-2dev, model: llama-tiny, tpu: cpu-2, sharding: fsdp, remat: none,
   global_batch_size: 4, seq_len: 128}
- {name: tensor-2dev, model: llama-tiny, tpu: cpu-2, sharding: fsdp_tensor, remat: none,
   global_batch_size: 4, seq_len: 128, overrides: [mesh.tensor=2]}
"""


def test_without_torch_xla_the_cli_answers_and_xla_commands_say_what_to_install(
        without_torch_xla):
    def run(*args):
        return subprocess.run(zoo_command(*args), env=without_torch_xla, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    assert run("--help").returncode == 0
    doctor = run("doctor")
    assert doctor.returncode != 0 and "Traceback" not in doctor.stderr
    assert "zoo doctor needs torch_xla, which is not installed" in doctor.stderr


@pytest.mark.parametrize("args, says", [
    (["--nproc", "2"], "--nproc starts processes for --backend dtensor"),
    (["--backend", "dtensor", "--tpu", "cpu-4"], "--tpu and --on are the xla backend's"),
    (["--backend", "dtensor", "remat=scan"], "use torch_xla's scan"),
])
def test_what_the_dtensor_backend_cannot_run_is_one_line(args, says, tmp_path):
    result = zoo("train", "llama-tiny", "--steps", "2", *args, "--out", str(tmp_path / "r"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert says in result.stderr
    assert not (tmp_path / "r" / "checkpoints").exists()
