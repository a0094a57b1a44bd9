"""HardwareSpec presets, overrides and validation of impossible specs."""

import pytest

from runtime_sim.contract.errors import IccaError, InvalidHardwareSpecError
from runtime_sim.contract.hardware import PRESET_NAMES, HardwareSpec, preset, small_chip


def test_ipu_mk2_preset_matches_sourced_figures():
    hw = preset("ipu-mk2")
    assert hw.num_cores == 1472
    assert hw.sram_bytes_per_core == 624 * 1024
    assert hw.link_bandwidth == 5.5e9
    assert hw.shift_buffer_bytes == 8 * 1024
    # 250 TFLOPS fp16 per chip (T10 Table 3) within 2%.
    assert hw.peak_matrix_flops == pytest.approx(250e12, rel=0.02)


def test_every_preset_builds_and_round_trips():
    for name in PRESET_NAMES:
        hw = preset(name)
        assert HardwareSpec.from_dict(hw.to_dict()) == hw
    pod = preset("ipu-pod4-hbm")
    assert pod.num_cores == 4 * 1472 and pod.hbm_bandwidth == 16e12 and pod.num_chips == 4


def test_overrides_without_editing_code():
    hw = preset("ipu-mk2").with_overrides(num_cores=16, name="tiny")
    assert hw.num_cores == 16 and hw.name == "tiny"
    assert small_chip(4).num_cores == 4


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_cores", 0),
        ("num_cores", -3),
        ("link_bandwidth", -1.0),
        ("clock_hz", 0.0),
        ("sram_bytes_per_core", 0),
        ("topology", "torus"),
        ("shift_buffer_bytes", 10**9),
        ("dtypes", ("int8",)),
    ],
)
def test_invalid_specs_raise_one_clear_error(field, value):
    with pytest.raises(InvalidHardwareSpecError) as info:
        preset("ipu-mk2", **{field: value})
    assert field in str(info.value)
    assert isinstance(info.value, IccaError)


def test_unknown_preset_and_fields():
    with pytest.raises(InvalidHardwareSpecError, match="unknown hardware preset"):
        preset("ipu-mk9")
    with pytest.raises(InvalidHardwareSpecError, match="unknown HardwareSpec fields"):
        HardwareSpec.from_dict({**preset("ipu-mk2").to_dict(), "cores": 3})


def test_masks_are_read_but_never_computed():
    from runtime_sim.contract.errors import UnsupportedDtypeError
    from runtime_sim.contract.hardware import check_dtype

    hw = small_chip(4, dtypes=("float32",))
    hw.check_dtype("bool", "condition", mask=True)
    check_dtype("bfloat16", "x")  # every 16-bit format the device computes
    with pytest.raises(UnsupportedDtypeError, match="dtype bool"):
        hw.check_dtype("bool", "result")
    with pytest.raises(UnsupportedDtypeError, match="dtype bfloat16"):
        hw.check_dtype("bfloat16", "x", mask=True)


def test_preset_names_are_case_insensitive_and_a_typo_gets_a_suggestion():
    assert preset("IPU-Mk2") == preset("ipu-mk2")
    with pytest.raises(InvalidHardwareSpecError, match="did you mean 'ipu-pod4-hbm'"):
        preset("ipu-pod4-hmb")
