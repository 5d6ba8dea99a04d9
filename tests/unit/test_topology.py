import json

import pytest
from click.testing import CliRunner

from core.topology import TopologyError, parse
from tools.cli import cli

TiB = 2**40
GiB = 2**30

# name, chips, hosts, chips_per_host, devices, peak bf16 FLOP/s per chip, HBM per chip
REAL_SLICES = [
    ("v2-8", 4, 1, 4, 8, 45e12, 16 * GiB),
    ("v2-32", 16, 4, 4, 32, 45e12, 16 * GiB),
    ("v3-8", 4, 1, 4, 8, 123e12, 32 * GiB),
    ("v3-128", 64, 16, 4, 128, 123e12, 32 * GiB),
    ("v4-8", 4, 1, 4, 4, 275e12, 32 * GiB),
    ("v4-32", 16, 4, 4, 16, 275e12, 32 * GiB),
    ("v4-384", 192, 48, 4, 192, 275e12, 32 * GiB),
    ("v4-4096", 2048, 512, 4, 2048, 275e12, 32 * GiB),
    ("v5p-8", 4, 1, 4, 4, 459e12, 95 * GiB),
    ("v5p-128", 64, 16, 4, 64, 459e12, 95 * GiB),
    ("v5litepod-1", 1, 1, 1, 1, 197e12, 16 * GiB),
    ("v5litepod-8", 8, 1, 8, 8, 197e12, 16 * GiB),
    ("v5litepod-16", 16, 4, 4, 16, 197e12, 16 * GiB),
    ("v5e-256", 256, 64, 4, 256, 197e12, 16 * GiB),
    ("v6e-4", 4, 1, 4, 4, 918e12, 32 * GiB),
    ("v6e-8", 8, 1, 8, 8, 918e12, 32 * GiB),
    ("v6e-256", 256, 64, 4, 256, 918e12, 32 * GiB),
    ("cpu-8", 8, 1, 8, 8, None, None),
]


@pytest.mark.parametrize("name,chips,hosts,per_host,devices,peak,hbm", REAL_SLICES)
def test_real_slice_types(name, chips, hosts, per_host, devices, peak, hbm):
    topo = parse(name)
    assert (topo.chips, topo.hosts, topo.chips_per_host, topo.devices) == (
        chips,
        hosts,
        per_host,
        devices,
    )
    assert topo.peak_bf16_flops_per_chip == peak
    assert topo.hbm_bytes_per_chip == hbm
    assert topo.chips == topo.hosts * topo.chips_per_host


def test_v5litepod_alias_is_v5e():
    assert parse("v5e-16").to_dict() | {"name": "x"} == parse("v5litepod-16").to_dict() | {
        "name": "x"
    }


def test_bare_cpu_uses_cpu_num_devices(monkeypatch):
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    assert parse("cpu").chips == 4


@pytest.mark.parametrize("bad", ["v4-33", "v9-8", "tpu", "v5litepod-3", "v4-12", "cpu-0", ""])
def test_impossible_types_name_the_valid_forms(bad):
    with pytest.raises(TopologyError, match="valid forms"):
        parse(bad)


def test_cli_json_has_the_documented_keys():
    result = CliRunner().invoke(cli, ["topology", "v4-32", "--json"])
    assert result.exit_code == 0
    info = json.loads(result.output)
    assert {
        "name",
        "generation",
        "chips",
        "hosts",
        "chips_per_host",
        "cores_per_chip",
        "peak_bf16_flops_per_chip",
        "hbm_bytes_per_chip",
    } <= set(info)
    assert (info["chips"], info["hosts"], info["peak_bf16_flops_per_chip"]) == (16, 4, 275e12)


@pytest.mark.parametrize(
    "name,chips,peak",
    [
        ("v5litepod-16", 16, 197e12),
        ("v6e-256", 256, 918e12),
        ("v5p-128", 64, 459e12),
        ("cpu-8", 8, None),
    ],
)
def test_cli_acceptance_numbers(name, chips, peak):
    info = json.loads(CliRunner().invoke(cli, ["topology", name, "--json"]).output)
    assert (info["chips"], info["peak_bf16_flops_per_chip"]) == (chips, peak)


def test_cli_bad_type_is_one_line_and_nonzero():
    result = CliRunner().invoke(cli, ["topology", "v4-33"])
    assert result.exit_code != 0
    assert result.output.count("\n") == 1 and "valid forms" in result.output


def test_slices_of_one_type_count_every_chip_host_and_device():
    two = parse("2xv6e-256")
    assert (two.slices, two.chips, two.hosts, two.devices) == (2, 512, 128, 512)
    assert (two.slice_name, two.devices_per_slice, two.one_slice()) == (
        "v6e-256", 256, parse("v6e-256"))
    assert parse("1xv5p-128") == parse("v5p-128")
    simulated = parse("2xcpu-4")  # one process: one host holding both simulated slices
    assert (simulated.slices, simulated.devices, simulated.hosts) == (2, 8, 1)


@pytest.mark.parametrize("bad,message", [("0xv6e-8", "no slices"), ("2x2xv6e-8", "nests"),
                                         ("2xcpu", "2xcpu-4"), ("2xv6e-7", "valid forms")])
def test_bad_slice_counts_say_what_is_wrong(bad, message):
    with pytest.raises(TopologyError, match=message):
        parse(bad)


def test_topology_gives_both_networks_per_chip():
    info = json.loads(CliRunner().invoke(cli, ["topology", "2xv5p-128", "--json"]).output)
    assert info["slices"] == 2
    assert info["ici_bytes_per_s_per_chip"] == 600e9
    assert info["dcn_bytes_per_s_per_chip"] == 50e9 / 8  # 50 Gbps per chip (Google's spec)
