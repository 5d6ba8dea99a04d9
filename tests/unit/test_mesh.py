import pytest

from zoo.core.mesh import MeshConfig, MeshError, resolve_axis_sizes


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
