import os
import subprocess
import sys

from click.testing import CliRunner

from tools.cli import cli


def test_help_lists_only_working_commands():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    commands = result.output.split("Commands:")[1].split()
    assert [c for c in commands if c in {"doctor", "topology"}] == ["doctor", "topology"]


def test_help_does_not_import_torch():
    code = "import sys; from tools.cli import cli; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def zoo(*args, devices=8):
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices)}
    return subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_doctor_runs_a_sharded_matmul_over_8_devices():
    result = zoo("doctor", "mesh.tensor=2")
    assert result.returncode == 0, result.stderr
    assert "CPU, 8 devices" in result.stdout
    assert "mesh         data=1 fsdp=4 sequence=1 expert=1 tensor=2" in result.stdout
    assert "over 8 shards: ok" in result.stdout


def test_doctor_bad_mesh_is_one_line_with_a_fix_and_nonzero():
    """--tpu cpu-4 is resolved as `zoo train` resolves it: 4 devices, whatever the env says."""
    result = zoo("doctor", "--tpu", "cpu-4", "mesh.tensor=3")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "Error: mesh data=1 fsdp=-1 sequence=1 expert=1 tensor=3 cannot fill 4 devices: "
        "3 does not divide 4; use axis sizes that fit the 4 devices, or check this mesh on 3 "
        "CPU devices: zoo doctor --tpu cpu-3"
    ]


def test_no_tensorflow_warning_from_flax_reaches_the_user():
    """torchax imports flax, whose flax.io warns that TensorFlow is missing."""
    result = subprocess.run([sys.executable, "-c", "import tools.cli, torchax"],
                            capture_output=True, text=True,
                            env={**os.environ, "PJRT_DEVICE": "CPU"})
    assert result.returncode == 0, result.stderr
    assert "Tensorflow library not found" not in result.stderr
