import dataclasses
import enum

import pytest
import yaml

from core.config import ConfigError, load, write_resolved
from core.mesh import MeshConfig
from core.remat import RematConfig


class Precision(enum.Enum):
    fp32 = "fp32"
    bf16 = "bf16"


@dataclasses.dataclass
class RunSchema:
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    remat: RematConfig = dataclasses.field(default_factory=RematConfig)
    seed: int = 0
    lr: float = 1e-3
    precision: Precision = Precision.fp32


def test_defaults_yaml_and_overrides_merge_in_order(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("seed: 5\nmesh: {tensor: 4}\nremat: {scan: [layers]}\n")
    cfg = load(RunSchema, files=[path], overrides=["mesh.tensor=2", "precision=bf16"])
    assert cfg.seed == 5 and cfg.mesh.tensor == 2 and cfg.mesh.fsdp == -1
    assert cfg.remat.scan == ["layers"] and cfg.precision is Precision.bf16
    assert isinstance(cfg.mesh, MeshConfig)


@pytest.mark.parametrize(
    "override,message",
    [
        ("mesh.fsdpp=2", "unknown config key 'mesh.fsdpp'; valid keys under 'mesh': data, fsdp"),
        ("sed=2", "unknown config key 'sed'; valid keys at the top level: mesh, remat, seed"),
        ("seed=abc", "bad value for config key 'seed'"),
        ("precision=fp8", "expected one of [fp32, bf16]"),
        ("lr", "is not key=value"),
    ],
)
def test_bad_overrides_fail_with_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError) as error:
        load(RunSchema, overrides=[override])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_unknown_key_in_a_file_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("mesh: {tensro: 2}\n")
    with pytest.raises(ConfigError, match=r"in .*bad.yaml: unknown config key 'mesh.tensro'"):
        load(RunSchema, files=[path])


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load(RunSchema, files=[tmp_path / "nope.yaml"])


def test_resolved_config_round_trips(tmp_path):
    cfg = load(RunSchema, overrides=["seed=7", "mesh.dcn={data: 2}"])
    path = write_resolved(cfg, tmp_path / "run")
    assert path == tmp_path / "run" / "config.yaml"
    assert yaml.safe_load(path.read_text())["mesh"]["dcn"] == {"data": 2}
    assert load(RunSchema, files=[path]) == cfg
