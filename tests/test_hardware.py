"""HardwareSpec presets, overrides and validation of impossible specs."""

import json

import pytest

from runtime_sim.contract.errors import IccaError, InvalidHardwareSpecError
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.hardware_files import load_hardware
from runtime_sim.contract.presets import PRESET_NAMES, preset, small_chip


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
    if isinstance(value, dict):  # an inline table
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
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
    assert loaded.assumed == hw.assumed and loaded.to_dict() == data
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
    assert (wh.num_cores, wh.clock_hz, wh.link_bandwidth, wh.hbm_bandwidth) == (72, 1e9, 32e9, 288e9)
    assert (bh.num_cores, bh.clock_hz, bh.hbm_bandwidth) == (120, 1.35e9, 512e9)
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


# -- presets as sold: rates per dtype, cores enabled, assumed fields (issue 38) ---------------
def test_wormhole_is_the_n150_as_sold() -> None:
    """The n150 specifications: 72 Tensix at 1 GHz, 74 TFLOPS FP16 and 148 TFLOPS BLOCKFP8
    (bfloat16 runs at BLOCKFP8's two fidelity phases); peaks computed from the fields."""
    wh = preset("tt-wormhole")
    assert wh.num_cores == 72 == len(wh.mesh_grid().cores)
    fp16 = wh.num_cores * wh.matrix_flops_per_cycle_for("float16") * wh.clock_hz
    assert fp16 == wh.peak_matrix_flops_for("float16") == wh.peak_matrix_flops
    assert fp16 == pytest.approx(74e12, rel=0.01)
    assert wh.peak_matrix_flops_for("bfloat16") == pytest.approx(148e12, rel=0.01)
    assert wh.peak_matrix_flops_for("float32") == fp16  # TF32 at four fidelity phases
    # one Tensix row (8 cores) of the 80 is fused off: no core in grid row 11
    rows = {r for r, _ in wh.mesh_grid().cores}
    assert 11 not in rows and len(rows) == 9
    bh = preset("tt-blackhole")
    assert bh.num_cores == 120 == len(bh.mesh_grid().cores)
    assert {c for _, c in bh.mesh_grid().cores} == set(range(1, 8)) | set(range(10, 15))


def test_ipu_peaks_per_dtype_are_graphcores() -> None:
    """IPU-POD128 datasheet: 31.955 PFLOPS FP16.16 and 7.989 PFLOPS FP32 for 128 GC200s."""
    hw = preset("ipu-mk2")
    assert hw.peak_matrix_flops_for("float16") == pytest.approx(31.955e15 / 128, rel=0.01)
    assert hw.peak_matrix_flops_for("float32") == pytest.approx(7.989e15 / 128, rel=0.01)
    assert hw.peak_matrix_flops_for("bfloat16") == hw.peak_matrix_flops_for("float16")
    assert "bfloat16" in hw.assumed_fields["dtypes"]  # no IPU format: printed as assumed
    pod = preset("ipu-pod4")
    assert pod.peak_matrix_flops_for("float32") == pytest.approx(4 * hw.peak_matrix_flops_for("float32"))


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_assumed_marks_name_real_fields(name) -> None:
    hw = preset(name)
    fields = {f for f in HardwareSpec.__dataclass_fields__} - {"name", "notes", "assumed"}
    assert set(hw.assumed_fields) <= fields
    assert all(isinstance(why, str) and why.strip() for why in hw.assumed_fields.values())
    # a field the caller sets is the caller's, no longer assumed; the others keep their mark
    marked = next(iter(hw.assumed_fields), None)
    if marked is not None:
        value = hw.to_dict()[marked]
        again = hw.with_overrides(**{marked: value})
        assert marked not in again.assumed_fields
        assert set(again.assumed_fields) == set(hw.assumed_fields) - {marked}
        assert preset(name, **{marked: value}).assumed_fields == again.assumed_fields


def test_a_chip_file_marks_its_own_assumptions(tmp_path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('base = "tt-wormhole"\nsync_cycles = 300\n'
                    '[assumed]\nlink_latency_s = "guessed from a simulator"\n')
    hw = load_hardware(path)
    assert hw.assumed_fields == {"link_latency_s": "guessed from a simulator"}
    based = tmp_path / "based.toml"
    based.write_text('base = "tt-wormhole"\nsync_cycles = 300\n')
    # the base's marks stay, but for the field the file sets
    marks = {k: v for k, v in preset("tt-wormhole").assumed_fields.items() if k != "sync_cycles"}
    assert load_hardware(based).assumed_fields == marks and "mesh_reserved" in marks
    for bad in ({"clock": "x"}, {"sync_cycles": " "}, {"name": "why"}, ["sync_cycles"]):
        with pytest.raises(InvalidHardwareSpecError, match="assumed"):
            small_chip(4, assumed=bad)


def test_matrix_rates_per_dtype_in_chip_files(tmp_path) -> None:
    """An old file's one ``matrix_flops_per_cycle`` is every dtype's rate; a table overrides
    the dtypes it lists."""
    old = tmp_path / "old.json"
    data = preset("ipu-mk2").to_dict()
    for key in ("matrix_flops_per_cycle_by_dtype", "assumed", "notes"):
        del data[key]
    old.write_text(json.dumps({**data, "matrix_flops_per_cycle": 100.0}))
    hw = load_hardware(old)
    assert {d: hw.matrix_flops_per_cycle_for(d) for d in hw.dtypes} == dict.fromkeys(hw.dtypes, 100.0)
    new = tmp_path / "new.toml"
    new.write_text('base = "ipu-mk2"\nmatrix_flops_per_cycle = 256\n'
                   '[matrix_flops_per_cycle_by_dtype]\nfloat32 = 64\nbfloat16 = 128\n')
    hw = load_hardware(new)
    assert [hw.matrix_flops_per_cycle_for(d) for d in ("float16", "bfloat16", "float32")] == [256, 128, 64]
    assert hw.matrix_flops_per_cycle_by_dtype == (("float32", 64.0), ("bfloat16", 128.0))
    assert hw.peak_matrix_flops_for("float32") == hw.num_cores * 64 * hw.clock_hz
    for bad, match in (({"int8": 4.0}, "must map dtypes"), ({"float16": 0.0}, "gives float16 0.0"),
                       ({"float16": float("nan")}, "gives float16"), ("fast", "must map dtypes")):
        with pytest.raises(InvalidHardwareSpecError, match=match):
            small_chip(4, matrix_flops_per_cycle_by_dtype=bad)


def test_a_model_is_timed_at_its_dtype_rate(exprs) -> None:
    """The same matmul in float16 and float32 on a chip whose float32 rate is a quarter of
    its float16 rate: compute time 2 M K N / (cores x rate x clock) each, ratio 4, in the
    timing simulator and in the compiler's plan cost."""
    from runtime_sim.contract.plan import ExecutionPlan
    from runtime_sim.contract.program import DeviceProgram, OpProgram
    from runtime_sim.timing import simulate_timing
    from tvm_icca.plan_search import plan_operator

    rates = {"float16": 64.0, "float32": 16.0}
    hw = small_chip(16, 1024 * 1024, sync_cycles=0, matrix_flops_per_cycle=rates["float16"],
                    matrix_flops_per_cycle_by_dtype={"float32": rates["float32"]})
    compute = {}
    for dtype, rate in rates.items():
        e = exprs.matmul(128, 128, 128, dtype=dtype)
        consts = {t.name: {"dtype": t.dtype, "shape": list(t.shape), "source": "resident"}
                  for t in e.inputs}
        op = OpProgram("op0", e, ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {})),
                       tuple(t.name for t in e.inputs), e.output.name)
        prog = DeviceProgram("r0", hw.to_dict(), (), (e.output.name,), (op,), constants=consts)
        report = simulate_timing([prog])
        compute[dtype] = report.compute_s
        assert report.compute_s == pytest.approx(2 * 128**3 / (16 * rate * hw.clock_hz))
        one = hw.with_overrides(num_cores=1, sync_cycles=118)
        one_core = plan_operator(exprs.matmul(32, 32, 32, dtype=dtype), one)
        assert one_core.time_s == pytest.approx(2 * 32**3 / rate / one.clock_hz
                                                + one.sync_cycles / one.clock_hz)
    assert compute["float32"] / compute["float16"] == pytest.approx(rates["float16"] / rates["float32"])


def test_simulate_prints_the_assumed_fields(capsys) -> None:
    from tvm_icca.cli.main import main

    hw = preset("tt-wormhole")
    assert main(["simulate", "nerf", "--tiny", "--no-progress", "--hw", "tt-wormhole"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("assumed (not sourced): "))
    block = [lines[first]] + [line for line in lines[first + 1:first + 8] if line.startswith("      ")]
    named = " ".join(line.strip() for line in block)
    assert all(len(line) <= 102 for line in block)  # wrapped, with its two-space indent
    assert all(name in named for name, _ in hw.assumed)
    assert "--json" in named
    assert main(["simulate", "nerf", "--tiny", "--no-progress", "--hw", "tt-wormhole", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["assumed_fields"] == hw.assumed_fields
