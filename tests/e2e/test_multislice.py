"""Multi-slice runs on XLA:CPU: virtual devices grouped into simulated slices
(`mesh.dcn.data=2`, or `--tpu 2xcpu-N`), data parallel across them. A checkpoint written
that way restores on one slice of the same size or half the devices, with the same losses
(different device counts reduce in another order: equal up to fp32 rounding)."""

import shutil

import pytest

from tests.support.runs import losses, zoo

SMALL = ["model.num_hidden_layers=2", "seq_len=64", "log_every=1", "optim.lr=1e-3",
         "global_batch_size=8", "checkpoint_every=3"]


def train(out, tpu: str, steps: int, *extra):
    result = zoo("train", "llama-tiny", "--tpu", tpu, "--steps", str(steps), "--out", str(out),
                 *SMALL, *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def check_restores(tmp_path, devices: int, elsewhere: dict[str, str]):
    """Train 6 steps on `devices` as 2 simulated slices, checkpointing at steps 3 and 6;
    resume copies of the run folder, its step-6 checkpoint taken away, on each of
    `elsewhere` (name -> --tpu) without slices and compare their losses for steps 4-6."""
    written = tmp_path / "two-slices"
    first = train(written, f"cpu-{devices}", 6, "mesh.dcn.data=2")
    assert f"'data': 2, 'fsdp': {devices // 2}" in first.stdout + first.stderr
    assert "2 slices (data x2 over DCN)" in first.stdout + first.stderr
    reference = losses(written)
    for name, tpu in elsewhere.items():
        shutil.copytree(written, tmp_path / name)
        shutil.rmtree(tmp_path / name / "checkpoints" / "step-00000006")
        resumed = train(tmp_path / name, tpu, 6)
        assert "resuming from step 3" in resumed.stdout
        got = losses(tmp_path / name)
        assert got.keys() == reference.keys()
        for step in (4, 5, 6):
            assert got[step] == pytest.approx(reference[step], rel=1e-5), (name, step)


@pytest.mark.slow  # by default: a two-slice step compiles (test_tpu_compile.py)
def test_a_two_slice_checkpoint_restores_on_half_the_devices(tmp_path):
    check_restores(tmp_path, 4, {"half": "cpu-2"})


@pytest.mark.slow
def test_a_two_slice_checkpoint_restores_on_one_slice_and_on_half_the_devices(tmp_path):
    check_restores(tmp_path, 8, {"one-slice": "cpu-8", "half": "cpu-4"})
