"""HardwareSpec presets, overrides and validation of impossible specs."""

import json

import pytest

from runtime_sim.contract.errors import IccaError, InvalidHardwareSpecError
from runtime_sim.contract.hardware import (
    PRESET_NAMES,
    HardwareSpec,
    load_hardware,
    preset,
    small_chip,
)


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
        ("hbm_bytes_per_chip", -1),
        ("hbm_bytes_per_chip", 2**30),  # a chip without HBM bandwidth has no HBM capacity
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


# -- hardware description files (tvm_icca.load_hardware) ------------------------------------
def _toml_value(value) -> str:
    """One value in TOML (the test writes its own files: tomllib only reads)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_hardware_file_round_trips_every_field(name, suffix, tmp_path):
    hw = preset(name)
    path = tmp_path / f"chip{suffix}"
    data = hw.to_dict()
    if suffix == ".json":
        path.write_text(json.dumps(data, indent=2))
    else:
        path.write_text("".join(f"{key} = {_toml_value(value)}\n" for key, value in data.items()))
    loaded = load_hardware(path)
    assert loaded == hw and loaded.name == hw.name and loaded.notes == hw.notes
    assert load_hardware(str(path)) == hw


def test_hardware_file_base_and_overrides(tmp_path):
    path = tmp_path / "wide_vector.toml"
    path.write_text('base = "IPU-Mk2"\nvector_flops_per_cycle = 8\nmatrix_tile = [32, 16, 32]\n'
                    'dtypes = ["float32"]\n')
    hw = load_hardware(path)
    assert hw.name == "wide_vector"  # the file's stem: it is not the preset any more
    assert hw == preset("ipu-mk2", name="wide_vector", vector_flops_per_cycle=8.0,
                        matrix_tile=(32, 16, 32), dtypes=("float32",))
    assert "ipu-mk2" in hw.notes
    named = tmp_path / "pod.json"
    named.write_text(json.dumps({"base": "ipu-pod4-hbm", "name": "my-pod", "hbm_bandwidth": 8e12,
                                 "notes": "half the HBM"}))
    pod = load_hardware(named)
    assert pod.name == "my-pod" and pod.hbm_bandwidth == 8e12 and pod.notes == "half the HBM"
    assert pod.num_chips == 4 and pod.hbm_controllers == 16


def test_a_chip_is_accepted_as_a_file_wherever_a_name_is(tmp_path):
    from tvm_icca.hardware_choice import resolve_hardware, use_hardware

    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"base": "ipu-mk2", "num_cores": 8}))
    for given in (path, str(path)):
        assert resolve_hardware(given).num_cores == 8
    with use_hardware(str(path)) as hw:
        assert hw.name == "tiny" and hw.num_cores == 8
    # a string with another suffix is still a preset name
    with pytest.raises(InvalidHardwareSpecError, match="unknown hardware preset"):
        resolve_hardware(str(tmp_path / "tiny.yaml"))
    # a file name that does not exist says so, not "unknown preset"
    with pytest.raises(InvalidHardwareSpecError, match="tiny2.json': no such file"):
        resolve_hardware(str(tmp_path / "tiny2.json"))


@pytest.mark.parametrize("file_name,text,fragment", [
    ("missing.toml", None, "no such file"),
    ("chip.yaml", "base: ipu-mk2", "unknown format '.yaml'"),
    ("syntax.toml", 'base = "ipu-mk2"\nnum_cores = \n', "invalid TOML: Invalid value (at line 2"),
    ("syntax.json", '{"base": "ipu-mk2",\n "num_cores": 8', "invalid JSON at line 2, column 16"),
    ("list.json", "[1, 2]", "one object of fields, not a list"),
    ("typo.toml", 'base = "ipu-mk2"\nvector_flop_per_cycle = 8\n',
     "unknown field 'vector_flop_per_cycle'; did you mean 'vector_flops_per_cycle'?"),
    ("nobase.toml", 'bsae = "ipu-mk2"\n', "did you mean 'base'?"),
    ("base.toml", 'base = "ipu-mk3"\n', "base: unknown hardware preset 'ipu-mk3'; did you mean 'ipu-mk2'?"),
    ("basetype.json", '{"base": 3}', "base must be a preset name"),
    ("incomplete.json", '{"num_cores": 8}', "missing sram_bytes_per_core"),
    ("impossible.toml", 'base = "ipu-mk2"\nnum_cores = 0\n', "num_cores=0 must be an integer"),
    ("dtype.toml", 'base = "ipu-mk2"\ndtypes = ["int8"]\n', "dtypes=['int8'] must be a non-empty subset"),
    ("latin1.toml", b"name = '\xe9'\n", "is not UTF-8 text"),
])
def test_every_hardware_file_error_is_one_error_naming_the_file(file_name, text, fragment, tmp_path):
    path = tmp_path / file_name
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    with pytest.raises(InvalidHardwareSpecError) as info:
        load_hardware(path)
    message = str(info.value)
    assert message.startswith(f"hardware file '{path}': "), message
    assert fragment in message, message
    assert len(message.splitlines()) == 1  # the command line prints it as one line


def test_hardware_file_path_must_be_a_path(tmp_path):
    with pytest.raises(InvalidHardwareSpecError, match="not int"):
        load_hardware(3)
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(InvalidHardwareSpecError, match="is a directory"):
        load_hardware(tmp_path / "dir.json")


def test_the_documented_example_file_loads():
    import pathlib

    example = pathlib.Path(__file__).parents[1] / "docs" / "examples" / "mk2_wide_vector.toml"
    hw = load_hardware(example)
    assert hw.name == "mk2-wide-vector" and hw.vector_flops_per_cycle == 16.0
    assert hw.sram_bytes_per_core == 512 * 1024 and hw.dtypes == ("float32", "float16")
    assert hw.num_cores == preset("ipu-mk2").num_cores


# -- mesh hardware as built (issue 27) ---------------------------------------------------------
@pytest.mark.parametrize("overrides, field_name", [
    (dict(hbm_placement="middle"), "hbm_placement"),
    (dict(hbm_placement="columns:a"), "hbm_placement"),
    (dict(hbm_placement="columns:1,1"), "hbm_placement"),
    (dict(hbm_placement="rows:1"), "hbm_placement"),
    (dict(hbm_placement="nodes:(0,1)"), "hbm_placement"),  # needs an explicit grid
    (dict(hbm_placement="nodes:(0,1)", mesh_rows=4, mesh_cols=5), "hbm_placement"),  # 1 node, 4 controllers
    (dict(hbm_placement="columns:9", mesh_rows=4, mesh_cols=5), "hbm_placement"),  # outside
    (dict(hbm_placement=[[0, 1], [1]], mesh_rows=4, mesh_cols=5), "hbm_placement"),
    (dict(mesh_rows=4), "mesh_rows"),  # without mesh_cols
    (dict(mesh_rows=3, mesh_cols=5), "mesh_rows"),  # 15 nodes for 16 cores
    (dict(mesh_reserved="rows:0"), "mesh_reserved"),  # needs an explicit grid
    (dict(mesh_reserved="rows:7", mesh_rows=5, mesh_cols=5), "mesh_reserved"),
    (dict(mesh_torus="yes"), "mesh_torus"),
    (dict(mesh_torus=1), "mesh_torus"),
    (dict(hbm_injection_bandwidth=-1.0), "hbm_injection_bandwidth"),
])
def test_bad_mesh_fields_are_named(overrides, field_name) -> None:
    with pytest.raises(InvalidHardwareSpecError, match=f"{field_name}="):
        small_chip(16, topology="mesh", hbm_bandwidth=1e11, hbm_controllers=4, **overrides)


def test_mesh_fields_are_canonical_and_round_trip(tmp_path) -> None:
    hw = small_chip(16, topology="mesh", hbm_bandwidth=1e11, hbm_controllers=4, mesh_rows=5,
                    mesh_cols=5, hbm_placement=[[0, 0], [0, 4], [4, 0], [4, 4]],
                    mesh_reserved=" columns:2 ", mesh_torus="true", hbm_injection_bandwidth="2e10")
    assert hw.hbm_placement == "nodes:(0,0),(0,4),(4,0),(4,4)"
    assert hw.mesh_reserved == "columns:2" and hw.mesh_torus is True
    grid = hw.mesh_grid()
    assert (grid.rows, grid.cols, grid.torus) == (5, 5, True)
    assert len(grid.cores) == 16 and all(c != 2 for _, c in grid.cores)
    assert grid.cores[0] == (0, 1)  # (0, 0) holds a controller
    assert HardwareSpec.from_dict(hw.to_dict()) == hw
    path = tmp_path / "torus.toml"
    path.write_text('base = "ipu-mk2"\nnum_cores = 16\ntopology = "mesh"\nhbm_bandwidth = 1e11\n'
                    'hbm_controllers = 2\nmesh_rows = 4\nmesh_cols = 5\n'
                    'hbm_placement = [[0, 2], [3, 2]]\nmesh_torus = true\n')
    loaded = load_hardware(path)
    assert loaded.hbm_placement == "nodes:(0,2),(3,2)" and loaded.mesh_torus
    # a columns placement widens the derived grid by its columns: 4 x 4 cores + 2 columns
    wide = small_chip(16, topology="mesh", hbm_bandwidth=1e11, hbm_controllers=4,
                      hbm_placement="columns:0,5")
    assert (wide.mesh_grid().rows, wide.mesh_grid().cols) == (4, 6)
    assert wide.mesh_grid().controllers == ((1, 0), (3, 0), (1, 5), (3, 5))


def test_defaults_keep_every_existing_preset() -> None:
    for name in ("ipu-mk2", "ipu-pod4-hbm-mesh"):
        hw = preset(name)
        assert (hw.hbm_placement, hw.mesh_torus, hw.mesh_rows, hw.mesh_cols) == ("edge", False, 0, 0)
        assert hw.mesh_grid().controllers is None and (hw.mesh_grid().rows, hw.mesh_grid().cols) == (32, 46)


def test_tenstorrent_presets_cite_their_sources() -> None:
    wh, bh = preset("tt-wormhole"), preset("tt-blackhole")
    assert (wh.num_cores, wh.clock_hz, wh.link_bandwidth, wh.hbm_bandwidth) == (80, 1e9, 32e9, 288e9)
    assert (bh.num_cores, bh.clock_hz, bh.hbm_bandwidth) == (140, 1.35e9, 512e9)
    assert bh.link_bandwidth == pytest.approx(64 * 1.35e9)
    assert wh.hbm_controllers == 18 and bh.hbm_controllers == 24
    assert wh.sram_bytes_per_core == bh.sram_bytes_per_core == 1499136
    assert wh.mesh_torus and bh.mesh_torus and "tt-metal" in wh.notes and "tt-npe" in bh.notes


def test_hbm_capacity_of_the_presets() -> None:
    """Elk §6.1's four HBM3E stacks per chip at 24 GB each; the Tenstorrent boards' GDDR6."""
    pod = preset("ipu-pod4-hbm")
    assert pod.hbm_bytes_per_chip == 4 * 24 * 2**30 == preset("ipu-pod4-hbm-mesh").hbm_bytes_per_chip
    assert pod.hbm_capacity_bytes == 4 * pod.hbm_bytes_per_chip
    assert preset("tt-wormhole").hbm_capacity_bytes == 12 * 2**30
    assert preset("tt-blackhole").hbm_capacity_bytes == 32 * 2**30
    assert preset("ipu-mk2").hbm_capacity_bytes == 0  # no HBM
    # not modelled unless given: a chip file that predates the field keeps working
    assert small_chip(4, hbm_bandwidth=1e11, hbm_controllers=2).hbm_capacity_bytes == 0
