import pytest

from core.mesh import (
    MeshConfig,
    MeshError,
    for_slices,
    resolve_axis_sizes,
    slice_major_device_ids,
)
from core.topology import parse


def test_fsdp_defaults_to_all_devices():
    assert resolve_axis_sizes(MeshConfig(), 8) == {
        "data": 1,
        "fsdp": 8,
        "sequence": 1,
        "expert": 1,
        "tensor": 1,
    }


def test_fill_axis_takes_what_is_left():
    sizes = resolve_axis_sizes(MeshConfig(data=2, tensor=2), 8)
    assert (sizes["data"], sizes["fsdp"], sizes["tensor"]) == (2, 2, 2)


def test_dcn_multiplies_axes_across_slices():
    sizes = resolve_axis_sizes(MeshConfig(dcn={"data": 2}), 32)
    assert (sizes["data"], sizes["fsdp"]) == (2, 16)


@pytest.mark.parametrize(
    "config,devices,message",
    [
        (MeshConfig(tensor=3), 8, "3 does not divide 8"),
        (MeshConfig(fsdp=4, tensor=4), 8, "has 16 devices but the runtime has 8"),
        (MeshConfig(data=-1), 8, "at most one -1"),
        (MeshConfig(tensor=0), 8, "positive"),
        (MeshConfig(dcn={"pipeline": 2}), 8, "unknown axes ['pipeline']"),
    ],
)
def test_impossible_meshes_are_clear_errors(config, devices, message):
    with pytest.raises(MeshError) as error:
        resolve_axis_sizes(config, devices)
    assert message in str(error.value)


def test_slices_default_to_data_parallel_across_them():
    assert for_slices(MeshConfig(), parse("2xv6e-256")).dcn == {"data": 2}
    assert for_slices(MeshConfig(), parse("v6e-256")).dcn == {}
    assert for_slices(MeshConfig(dcn={"data": 2}), parse("cpu-8")).dcn == {"data": 2}


@pytest.mark.parametrize("config,tpu,message", [
    (MeshConfig(dcn={"data": 2}), "v6e-256", "use --tpu 2xv6e-256"),
    (MeshConfig(dcn={"data": 4}), "2xv6e-256", "multiply to 2"),
    (MeshConfig(dcn={"tensor": 2}), "2xv6e-256", "collective of every layer"),
    (MeshConfig(dcn={"data": 3}), "cpu-8", "do not split the 8 devices"),
])
def test_slice_meshes_that_cannot_work_are_refused_in_one_line(config, tpu, message):
    with pytest.raises(MeshError, match=message):
        for_slices(config, parse(tpu))


def test_an_axis_split_over_slices_crosses_between_them_only_at_its_dcn_degree():
    sizes = {"data": 4, "fsdp": 2, "sequence": 1, "expert": 1, "tensor": 1}
    ids = slice_major_device_ids(sizes, {"data": 2}).reshape(4, 2)
    slice_of = ids // 4  # devices 0-3 are slice 0, 4-7 slice 1
    assert slice_of.tolist() == [[0, 0], [0, 0], [1, 1], [1, 1]]
    assert sorted(ids.flatten().tolist()) == list(range(8))
