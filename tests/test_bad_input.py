"""Bad input, held to the README's promise: one clear tvm_icca error, raised before any work,
or a correct result -- never a foreign exception, never a silent wrong answer.

Property-based (hypothesis) over HardwareSpec fields and device-program JSON mutations, and
table-driven over known hostile cases: every corrupt program is run through BOTH executors
(the functional device and the timing simulator; the VGM timing for VGM programs) and must
be refused by both with the same error type.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime_sim.contract.errors import (
    DeviceProgramError,
    IccaError,
    InvalidHardwareSpecError,
    InvalidPlanError,
    UnsupportedDtypeError,
)
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.hardware_limits import MAX_CORES
from runtime_sim.contract.plan import ExecutionPlan, VgmPlan
from runtime_sim.contract.presets import PRESET_NAMES, preset, small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.functional.device import SimulatedDevice
from runtime_sim.timing import simulate_timing
from runtime_sim.timing.vgm_timing import simulate_vgm_timing
from tvm_icca.testing import exprs as builders
from tvm_icca.testing.device_runs import reference_build


def one_paragraph(err: BaseException) -> None:
    text = str(err)
    assert text and "\n" not in text and "Traceback" not in text, text


# -- HardwareSpec ----------------------------------------------------------------------------
INT_FIELDS = ("num_cores", "sram_bytes_per_core", "num_chips", "sync_cycles",
              "shift_buffer_bytes", "hbm_controllers")
FLOAT_FIELDS = ("link_bandwidth", "clock_hz", "matrix_flops_per_cycle", "vector_flops_per_cycle",
                "host_bandwidth", "link_latency_s", "inter_chip_bandwidth", "hbm_bandwidth")

HOSTILE_HW = [
    ("matrix_tile", None), ("matrix_tile", "16x16x16"), ("matrix_tile", (16, 16)),
    ("matrix_tile", (16, 0, 16)), ("matrix_tile", (16, None, 16)), ("matrix_tile", (16.5, 16, 16)),
    ("num_cores", "many"), ("num_cores", "16 cores"), ("num_cores", None), ("num_cores", True),
    ("num_cores", 16.5), ("num_cores", 10**12), ("num_cores", 10**400), ("num_cores", [16]),
    ("num_cores", float("nan")), ("sram_bytes_per_core", float("inf")),
    ("link_bandwidth", float("nan")), ("link_bandwidth", float("inf")), ("link_bandwidth", "fast"),
    ("link_bandwidth", 0.0), ("link_bandwidth", -5.5e9), ("link_bandwidth", 10**400),
    ("link_latency_s", float("nan")), ("link_latency_s", -1e-9), ("link_latency_s", float("inf")),
    ("hbm_bandwidth", float("nan")), ("inter_chip_bandwidth", float("nan")),
    ("clock_hz", float("nan")), ("clock_hz", None), ("host_bandwidth", float("nan")),
    ("matrix_flops_per_cycle", float("-inf")), ("vector_flops_per_cycle", True),
    ("shift_buffer_bytes", 0), ("shift_buffer_bytes", -8), ("sync_cycles", -1),
    ("sync_cycles", float("nan")), ("num_chips", 0), ("num_chips", 3),
    ("topology", None), ("topology", "torus"), ("topology", ["mesh"]),
    ("dtypes", None), ("dtypes", ()), ("dtypes", ("int8",)), ("dtypes", (None,)), ("dtypes", 5),
    ("name", None), ("name", ""), ("name", 7), ("notes", 5),
]


@pytest.mark.parametrize("field,value", HOSTILE_HW, ids=[f"{f}={v!r}"[:40] for f, v in HOSTILE_HW])
def test_hostile_hardware_fields_raise_one_clear_error(field, value):
    for build in (lambda: preset("ipu-mk2", **{field: value}),
                  lambda: preset("ipu-mk2").with_overrides(**{field: value}),
                  lambda: HardwareSpec.from_dict({**preset("ipu-mk2").to_dict(), field: value}),
                  lambda: small_chip(**{"num_cores": 16, "sram_bytes_per_core": 64 * 1024, field: value})):
        with pytest.raises(InvalidHardwareSpecError) as info:
            build()
        assert field in str(info.value)
        one_paragraph(info.value)


def test_absurd_sizes_fail_before_any_allocation():
    with pytest.raises(InvalidHardwareSpecError, match="num_cores"):
        small_chip(10**12)
    with pytest.raises(InvalidHardwareSpecError, match="hbm_controllers"):
        preset("ipu-pod4-hbm", hbm_controllers=10**7)
    # the per-chip bound: 4 chips allow 4 x 256 controllers, not one more
    preset("ipu-pod4-hbm", hbm_controllers=4 * 256)
    with pytest.raises(InvalidHardwareSpecError, match="per chip"):
        preset("ipu-pod4-hbm", hbm_controllers=4 * 256 + 1)
    small_chip(MAX_CORES, 64 * 1024)  # the bound itself is accepted


def test_overrides_convert_and_normalize():
    hw = preset("ipu-mk2", num_cores="16", link_bandwidth=np.float32(4e9),
                matrix_tile=[np.int64(8), 16.0, "16"], dtypes="float32", hbm_controllers=np.int32(0))
    assert hw.num_cores == 16 and type(hw.num_cores) is int
    assert type(hw.link_bandwidth) is float and hw.link_bandwidth == 4e9
    assert hw.matrix_tile == (8, 16, 16) and all(type(t) is int for t in hw.matrix_tile)
    assert hw.dtypes == ("float32",)
    assert HardwareSpec.from_dict(json.loads(json.dumps(hw.to_dict()))) == hw


@pytest.mark.parametrize("bad", [
    lambda: preset("ipu-mk2", cores=3),
    lambda: preset("ipu-mk2").with_overrides(bandwidth=1e9),
    lambda: HardwareSpec.from_dict([1, 2, 3]),
    lambda: HardwareSpec.from_dict("ipu-mk2"),
    lambda: HardwareSpec.from_dict({"name": "x"}),
    lambda: preset(["ipu-mk2"]),
    lambda: preset(None),
])
def test_unknown_keys_and_wrong_containers(bad):
    with pytest.raises(InvalidHardwareSpecError) as info:
        bad()
    one_paragraph(info.value)


def test_hardware_json_round_trip_and_bad_json():
    from tvm_icca.hardware_choice import hardware_from_json, hardware_to_json, resolve_hardware

    for name in PRESET_NAMES:
        assert hardware_from_json(hardware_to_json(preset(name))) == preset(name)
    for text in ("[1, 2]", "{", '{"num_cores": NaN}', "null", '"ipu-mk2"'):
        with pytest.raises(InvalidHardwareSpecError):
            hardware_from_json(text)
    data = preset("ipu-mk2").to_dict()
    data["link_bandwidth"] = float("nan")
    with pytest.raises(InvalidHardwareSpecError, match="link_bandwidth"):
        hardware_from_json(json.dumps(data))  # json writes NaN, the spec refuses it
    with pytest.raises(InvalidHardwareSpecError):
        resolve_hardware(42)


_ANY = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10**20, max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.sampled_from(["16", "1e3", " 8 ", "nan", "inf", "-1", "0x10", "1_024", "float16"]),
    st.lists(st.integers(-4, 64), max_size=4), st.tuples(st.integers(0, 32), st.integers(0, 32), st.integers(0, 32)),
    st.lists(st.sampled_from(["float32", "float16", "int8"]), max_size=3),
)
_FIELDS = [f for f in HardwareSpec.__dataclass_fields__]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_FIELDS), _ANY, min_size=1, max_size=4),
       st.sampled_from(PRESET_NAMES))
def test_any_field_values_give_a_sound_spec_or_invalid_hardware_spec_error(overrides, base):
    try:
        hw = preset(base, **overrides)
    except InvalidHardwareSpecError as err:
        one_paragraph(err)
        return
    for name in INT_FIELDS:
        value = getattr(hw, name)
        assert type(value) is int and value >= 0, (name, value)
    for name in FLOAT_FIELDS:
        value = getattr(hw, name)
        assert type(value) is float and math.isfinite(value) and value >= 0, (name, value)
    assert hw.num_cores >= 1 and hw.num_cores <= MAX_CORES and hw.shift_buffer_bytes >= 1
    assert hw.usable_sram_bytes > 0 and hw.num_cores % hw.num_chips == 0
    assert len(hw.matrix_tile) == 3 and all(type(t) is int and t > 0 for t in hw.matrix_tile)
    assert isinstance(hw.topology, str) and hw.dtypes and all(isinstance(d, str) for d in hw.dtypes)
    assert math.isfinite(hw.peak_matrix_flops)
    assert HardwareSpec.from_dict(hw.to_dict()) == hw == hw.with_overrides()


# -- device programs: one validation for both executors --------------------------------------
HW = small_chip(16, 64 * 1024)


def _program(vgm: bool = False) -> DeviceProgram:
    """Two operators: relu(A @ B + bias) then a softmax of its result (an on-chip intermediate)."""
    mm = builders.matmul_bias_relu(8, 16, 8)
    sm = builders.softmax(8, 8)
    sm = type(sm)(sm.kind, sm.axes, (type(sm.inputs[0])("C", *[getattr(sm.inputs[0], f) for f in ("shape", "dtype", "indices")]),),
                  type(sm.output)("Y", *[getattr(sm.output, f) for f in ("shape", "dtype", "indices")]),
                  sm.body, sm.local_axes)
    if vgm:
        p_mm, p_sm = VgmPlan({"m": 4, "n": 4, "k": 8}), VgmPlan({"i": 4, "j": 8})
    else:
        p_mm = ExecutionPlan({"m": 2, "n": 2}, ({}, {}, {}, {}))
        p_sm = ExecutionPlan({"i": 4}, ({}, {}))
    ops = (OpProgram("mm", mm, p_mm, ("A", "B", "bias"), "C"),
           OpProgram("sm", sm, p_sm, ("C",), "Y"))
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype) for t in mm.inputs)
    return DeviceProgram("r0", HW.to_dict(), decls, ("Y",), ops)


def _inputs(data: dict) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    decls = data.get("inputs", []) if isinstance(data, dict) else []
    for decl in decls if isinstance(decls, list) else []:
        try:
            out.append(rng.standard_normal([max(int(s), 1) for s in decl["shape"]]).astype(decl["dtype"]))
        except Exception:  # noqa: BLE001  (a mutated declaration: any array will do)
            out.append(np.zeros(1, "float32"))
    return out


def _run_device(data) -> object:
    return SimulatedDevice().run(json.dumps(data), _inputs(data))


def _run_timing(data) -> object:
    return simulate_timing([data])


def _run_vgm_timing(data) -> object:
    return simulate_vgm_timing([DeviceProgram.from_dict(data)])


def test_the_base_programs_run_on_both_executors():
    for vgm in (False, True):
        data = _program(vgm).to_dict()
        outs = _run_device(data)
        assert outs[0].shape == (8, 8) and np.allclose(outs[0].sum(axis=1), 1.0, atol=1e-5)
        (_run_vgm_timing if vgm else _run_timing)(data)


def _set(path, value):
    def mutate(d):
        node = d
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return d
    return mutate


def _delete(path):
    def mutate(d):
        node = d
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        return d
    return mutate


MM = ("ops", 0)
MM_EXPR = MM + ("expr",)
BODY_LOAD = MM_EXPR + ("body", "args", 0)
E = DeviceProgramError

#: (id, mutation of the program's JSON dict, error type both executors must raise)
MUTATIONS = [
    ("top-level list", lambda d: [d], E),
    ("top-level string", lambda d: "program", E),
    ("top-level null", lambda d: None, E),
    ("string version", _set(("version",), "2"), E),
    ("bool version", _set(("version",), True), E),
    ("future version", _set(("version",), 99), E),
    ("no version", _delete(("version",)), E),
    ("no format", _delete(("format",)), E),
    ("no ops", _delete(("ops",)), E),
    ("no inputs", _delete(("inputs",)), E),
    ("ops not a list", _set(("ops",), {"mm": 1}), E),
    ("op is a list", _set(("ops", 0), [1, 2]), E),
    ("inputs a string", _set(("inputs",), "ABC"), E),
    ("input_names a string", _set(MM + ("input_names",), "ABb"), E),
    ("negative input shape", _set(("inputs", 0, "shape"), [-8, 16]), E),
    ("zero input shape", _set(("inputs", 0, "shape"), [0, 16]), E),
    ("string dimension", _set(("inputs", 0, "shape"), ["8", 16]), E),
    ("float dimension", _set(("inputs", 0, "shape"), [8.5, 16]), E),
    ("negative tensor shape in expr", _set(MM_EXPR + ("inputs", 0, "shape"), [-8, 16]), E),
    ("unknown dtype", _set(("inputs", 0, "dtype"), "complex128"), E),
    ("dtype the chip lacks", _set(("inputs", 0, "dtype"), "int8"), UnsupportedDtypeError),
    ("unknown source", _set(("inputs", 0, "source"), "disk"), E),
    ("duplicate input", lambda d: (d["inputs"].append(dict(d["inputs"][0])), d)[1], E),
    ("extent larger than the tensor", _set(MM_EXPR + ("axes", 2, "extent"), 32), E),
    ("output extent larger", _set(MM_EXPR + ("axes", 0, "extent"), 9), E),
    ("zero extent", _set(MM_EXPR + ("axes", 0, "extent"), 0), E),
    ("negative extent", _set(MM_EXPR + ("axes", 1, "extent"), -8), E),
    ("duplicate axis", _set(MM_EXPR + ("axes", 1, "name"), "m"), E),
    ("reduce flag a string", _set(MM_EXPR + ("axes", 2, "reduce"), "yes"), E),
    ("reduction axis made spatial", _set(MM_EXPR + ("axes", 2, "reduce"), False), E),
    ("unknown axis in an access", _set(MM_EXPR + ("inputs", 0, "indices", 0, "terms", 0, 0), "z"), E),
    ("unknown axis in a load", _set(BODY_LOAD + ("index", 0, "terms", 0, 0), "z"), E),
    ("load of input 7", _set(BODY_LOAD + ("input",), 7), E),
    ("load of input -1", _set(BODY_LOAD + ("input",), -1), E),
    ("load input a string", _set(BODY_LOAD + ("input",), "0"), E),
    ("load with one index", lambda d: (d["ops"][0]["expr"]["body"]["args"][0]["index"].pop(), d)[1], E),
    ("index coefficient a float", _set(BODY_LOAD + ("index", 0, "terms", 0, 1), 1.5), E),
    ("index term not a pair", _set(BODY_LOAD + ("index", 0, "terms", 0), ["m"]), E),
    ("unknown expression op", _set(MM_EXPR + ("body", "op"), "frobnicate"), E),
    ("binary op with one arg", lambda d: (d["ops"][0]["expr"]["body"]["args"].pop(), d)[1], E),
    ("expression node a list", _set(MM_EXPR + ("body",), [1, 2]), E),
    ("NaN constant", _set(MM_EXPR + ("epilogue", "args", 1, "value"), float("nan")), E),
    ("string constant", _set(MM_EXPR + ("epilogue", "args", 1, "value"), "0"), E),
    ("result in the body", _set(MM_EXPR + ("body",), {"op": "result"}), E),
    ("epilogue reads a reduce axis", _set(MM_EXPR + ("epilogue", "args", 0, "args", 1, "index", 0, "terms", 0, 0), "k"), E),
    ("unknown reduce combiner", _set(("ops", 1, "expr", "body", "args", 1, "combiner"), "prod"), E),
    ("reduce over a spatial axis", _set(("ops", 1, "expr", "body", "args", 1, "axes"), ["i"]), E),
    ("cast to an unknown dtype", _set(MM_EXPR + ("body",), {"op": "cast", "dtype": "qint4", "args": [{"op": "const", "value": 1}]}), E),
    ("unknown kind", _set(MM_EXPR + ("kind",), "fft"), E),
    ("epilogue input out of range", _set(MM_EXPR + ("epilogue_inputs",), [5]), E),
    ("output never computed", _set(("outputs",), ["nope"]), E),
    ("output name not a string", _set(("outputs",), [3]), E),
    ("reads an unknown tensor", _set(MM + ("input_names", 0), "nope"), E),
    ("reads a tensor of another shape", _set(("ops", 1, "input_names", 0), "A"), E),
    ("fewer input names", _set(MM + ("input_names",), ["A", "B"]), E),
    ("output overwrites an input", _set(MM + ("output_name",), "A"), E),
    ("output shape unlike its axes", _set(MM_EXPR + ("output", "shape"), [8, 9]), E),
    ("output index not a plain axis", _set(MM_EXPR + ("output", "indices", 0, "offset"), 1), E),
    ("F_op on an unknown axis", _set(MM + ("plan", "op_partition"), {"z": 2}), E),
    ("F_op zero", _set(MM + ("plan", "op_partition", "m"), 0), E),
    ("F_op a string", _set(MM + ("plan", "op_partition", "m"), "2"), E),
    ("F_op beyond the extent", _set(MM + ("plan", "op_partition", "m"), 64), E),
    ("op_partition a list", _set(MM + ("plan", "op_partition"), [2, 2]), E),
    ("temporal of the wrong length", _set(MM + ("plan", "temporal"), [{}]), E),
    ("temporal factor zero", _set(MM + ("plan", "temporal"), [{"n": 0}, {}, {}, {}]), E),
    ("loop order on an unknown axis", _set(MM + ("plan", "loop_order"), ["z"]), E),
    ("unknown execution model", _set(MM + ("plan", "execution"), "magic"), E),
    ("unknown idle placement", _set(MM + ("idle_plan",), "everywhere"), E),
    ("NaN estimated time", _set(MM + ("estimated_time_s",), float("nan")), E),
    ("more cores than the chip", _set(MM + ("plan", "op_partition"), {"m": 8, "n": 8}), InvalidPlanError),
    ("constant with a negative shape", _set(("constants",), {"W": {"dtype": "float32", "shape": [-1]}}), E),
    ("constant of an unknown source", _set(("constants",), {"W": {"dtype": "float32", "shape": [2], "source": "disk"}}), E),
    ("constants a list", _set(("constants",), []), E),
    ("hardware with zero cores", _set(("hardware", "num_cores"), 0), InvalidHardwareSpecError),
    ("hardware with NaN bandwidth", _set(("hardware", "link_bandwidth"), float("nan")), InvalidHardwareSpecError),
    ("hardware with no shift buffer", _set(("hardware", "shift_buffer_bytes"), 0), InvalidHardwareSpecError),
    ("hardware a list", _set(("hardware",), [1]), E),
    ("region a number", _set(("region",), 5), E),
]


@pytest.mark.parametrize("mutation,expected", [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_corrupt_programs_are_refused_by_both_executors_alike(mutation, expected):
    data = mutation(copy.deepcopy(_program().to_dict()))
    errors = []
    for run in (_run_device, _run_timing):
        with pytest.raises(IccaError) as info:
            run(data)
        errors.append(info.value)
        one_paragraph(info.value)
    assert [type(e) for e in errors] == [expected, expected], [repr(e) for e in errors]


VGM_MUTATIONS = [m for m in MUTATIONS if "plan" not in m[0] and "F_op" not in m[0]
                 and "temporal" not in m[0] and "loop order" not in m[0] and "cores" not in m[0]
                 and "top-level" not in m[0] and "op_partition" not in m[0]] + [
    ("tile on an unknown axis", _set(MM + ("plan", "tiles"), {"z": 2}), E),
    ("tile zero", _set(MM + ("plan", "tiles", "m"), 0), E),
    ("tiles a list", _set(MM + ("plan", "tiles"), [4]), E),
]


@pytest.mark.parametrize("mutation,expected", [m[1:] for m in VGM_MUTATIONS], ids=[m[0] for m in VGM_MUTATIONS])
def test_corrupt_vgm_programs_are_refused_by_both_executors_alike(mutation, expected):
    data = mutation(copy.deepcopy(_program(vgm=True).to_dict()))
    errors = []
    for run in (_run_device, _run_vgm_timing):
        with pytest.raises(IccaError) as info:
            run(data)
        errors.append(info.value)
        one_paragraph(info.value)
    assert [type(e) for e in errors] == [expected, expected], [repr(e) for e in errors]


@pytest.mark.parametrize("text", ["", "{", "[" * 100_000, "null", "[]", '"x"', b"\xff\xfe", 42, None])
def test_program_text_that_is_no_program(text):
    with pytest.raises(DeviceProgramError) as info:
        DeviceProgram.from_json(text)
    one_paragraph(info.value)
    with pytest.raises(IccaError):
        SimulatedDevice().run(text, [])


def test_empty_program_lists():
    with pytest.raises(DeviceProgramError):
        simulate_timing([])
    with pytest.raises(DeviceProgramError):
        simulate_vgm_timing([])
    with pytest.raises(DeviceProgramError, match="compute-shift plan"):
        simulate_vgm_timing([_program()])


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


_BASE = _program().to_dict()
_ALL_PATHS = [p for p in _paths(_BASE) if p]
_JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 40), st.sampled_from([10**12, -10**12, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
    st.sampled_from(["m", "n", "k", "i", "j", "A", "B", "C", "Y", "bias", "float16", "int8", "sum",
                     "max", "load", "result", "add", "vgm", "spread"]),
    st.lists(st.integers(-2, 16), max_size=3), st.builds(dict), st.builds(list),  # fresh objects
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(_ALL_PATHS), _JSON_VALUES), min_size=1, max_size=3))
def test_random_program_mutations_never_give_a_foreign_error_or_disagree(edits):
    data = copy.deepcopy(_BASE)
    for path, value in edits:
        try:
            _set(path, value)(data)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier edit removed the path
    results = []
    for run in (_run_device, _run_timing):
        try:
            run(data)
            results.append(None)
        except IccaError as err:
            one_paragraph(err)
            results.append(type(err))
    # either both run it or both refuse it, the same way
    assert results[0] == results[1], (edits, results)


# -- workload builders ------------------------------------------------------------------------
BAD_WORKLOAD_ARGS = [
    ("llama2-7b", {"batch": 0}), ("llama2-7b", {"batch": -2}), ("llama2-7b", {"context": -1}),
    ("llama2-7b", {"context": 0}), ("llama2-7b", {"num_layers": -1}), ("llama2-7b", {"num_layers": 0}),
    ("llama2-7b", {"batch": 2.5}), ("llama2-7b", {"batch": 2.0}), ("llama2-7b", {"batch": "4"}),
    ("llama2-7b", {"batch": True}), ("llama2-7b", {"batch": None}), ("llama2-7b", {"num_layers": 10**6}),
    ("opt-1.3b", {"context": float("nan")}), ("gemma2-27b", {"batch": 10**12}),
    ("bert-large", {"seq_len": 0}), ("bert-large", {"seq_len": 4096}), ("bert-large", {"batch": -1}),
    ("resnet50", {"image": 0}), ("resnet50", {"image": -224}), ("resnet50", {"context": 3}),
    ("vit-b16", {"tiny": "yes"}), ("nerf", {"dtype": "int8"}), ("dit-xl2", {"dtype": 16}),
    ("nerf", {"batch": 0}), ("dit-xl2", {"num_layers": 0}), ("vit-b16", {"image": 224}),
]


@pytest.mark.parametrize("name,kwargs", BAD_WORKLOAD_ARGS, ids=[f"{n}-{k}" for n, k in BAD_WORKLOAD_ARGS])
def test_workload_builders_refuse_bad_arguments_themselves(name, kwargs):
    from runtime_sim.contract.errors import InvalidWorkloadError
    from tvm_icca.workloads import get_workload

    with pytest.raises(InvalidWorkloadError) as info:
        get_workload(name, **kwargs)
    one_paragraph(info.value)


def test_workload_builders_called_directly_and_unknown_names():
    from runtime_sim.contract.errors import InvalidWorkloadError, UnknownWorkloadError
    from tvm_icca.workloads import canonical_name, get_workload
    from tvm_icca.workloads.llama import llama2
    from tvm_icca.workloads.resnet import resnet

    with pytest.raises(InvalidWorkloadError, match="batch"):
        llama2("llama2-7b", batch=0)
    with pytest.raises(UnknownWorkloadError, match="llama2-8b"):
        llama2("llama2-8b")
    with pytest.raises(InvalidWorkloadError, match="num_layers"):
        resnet("resnet18", num_layers=-3)
    for bad in ("gpt-5", "", None, 3):
        with pytest.raises(UnknownWorkloadError) as info:
            canonical_name(bad)
        assert isinstance(info.value, KeyError)  # a lookup miss, as before
        one_paragraph(info.value)
    with pytest.raises(UnknownWorkloadError):
        get_workload("gpt-5")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["batch", "context", "num_layers"]),
       st.one_of(st.integers(-10**6, 0), st.floats(allow_nan=True), st.text(max_size=3), st.booleans(),
                 st.integers(10**10, 10**20)))
def test_workload_argument_grid(arg, value):
    from runtime_sim.contract.errors import InvalidWorkloadError
    from tvm_icca.workloads import get_workload

    with pytest.raises(InvalidWorkloadError):
        get_workload("llama2-7b", tiny=True, **{arg: value})


# -- ONNX models with external data -------------------------------------------------------------
def _onnx_matmul_model():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 8)).astype("float32"), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [weight])
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), weight


def test_onnx_with_external_data_loads_from_any_working_directory(tmp_path, monkeypatch):
    import onnx
    from onnx import numpy_helper

    import tvm_icca

    model, weight = _onnx_matmul_model()
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    mod = tvm_icca.load_onnx(str(path))
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(reference_build(mod), tvm.cpu())
    x = np.random.default_rng(1).standard_normal((4, 16)).astype("float32")
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(),
                               x @ numpy_helper.to_array(weight), rtol=1e-5, atol=1e-5)
    # the model's own bytes cannot find their data: one clear error, not a checker traceback
    with pytest.raises(tvm_icca.ModelImportError, match="external data"):
        tvm_icca.load_onnx(path.read_bytes())
    (folder / "m.data").unlink()
    with pytest.raises(tvm_icca.ModelImportError, match="m.data") as info:
        tvm_icca.load_onnx(str(path))
    one_paragraph(info.value)


@pytest.mark.parametrize("shape_dict", [{"x": 5}, {"x": [4, -1]}, [("x", [4, 16])], {"x": ["4", 16]}])
def test_onnx_bad_shape_dict(shape_dict):
    import tvm_icca

    model, _ = _onnx_matmul_model()
    with pytest.raises(tvm_icca.ModelImportError) as info:
        tvm_icca.load_onnx(model, shape_dict)
    one_paragraph(info.value)


# -- arguments of an ICCA-compiled executable ---------------------------------------------------
def test_wrong_argument_shape_or_dtype_is_an_input_mismatch_error_for_icca_only():
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    import tvm_icca
    from runtime_sim.contract.errors import InputMismatchError
    from tvm_icca.backend.input_check import check_inputs_pass
    from tvm_icca.backend.target import _ORIGINAL_DEFAULT_BUILD, offload_to_icca

    @tvm.script.ir_module
    class Model:
        @R.function
        def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((16, 8), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                R.output(y)
            return y

    hw = small_chip(16)

    @tvm.transform.module_pass(opt_level=0, name="IccaWithInputCheck")
    def pipeline(mod, _ctx):
        return _ORIGINAL_DEFAULT_BUILD()(check_inputs_pass()(offload_to_icca(hw)(mod)))

    with tvm_icca.use_hardware(hw):
        icca = relax.VirtualMachine(tvm.compile(Model, target="icca", relax_pipeline=pipeline), tvm.cpu())
    cpu = relax.VirtualMachine(reference_build(Model), tvm.cpu())
    x = np.ones((8, 16), "float32")
    w = np.ones((16, 8), "float32")
    np.testing.assert_allclose(icca["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy(), x @ w)
    for bad, what in ((np.ones((8, 15), "float32"), "[8, 15]"), (np.ones((8, 16), "float16"), "float16"),
                      (np.ones(8, "float32"), "[8]")):
        with pytest.raises(InputMismatchError, match=r"'x'.*\[8, 16\]") as info:
            icca["main"](tvm.runtime.tensor(bad), tvm.runtime.tensor(w))
        assert what in str(info.value)
        one_paragraph(info.value)
        with pytest.raises(Exception) as other:  # other targets: TVM's own check, unchanged
            cpu["main"](tvm.runtime.tensor(bad), tvm.runtime.tensor(w))
        assert not isinstance(other.value, IccaError)


# -- capacity errors in the user's words ------------------------------------------------------
def _in_user_words(err: BaseException, *expected: str) -> str:
    """One paragraph naming what it must, without a generated symbol over 60 characters."""
    import re

    from runtime_sim.contract.errors import MAX_NAME_CHARS

    one_paragraph(err)
    text = str(err)
    assert max(len(word) for word in re.split(r"[\s'(),;:]+", text)) <= MAX_NAME_CHARS, text
    for part in expected:
        assert part in text, (part, text)
    return text


def _conv_stack(layers: int):
    """``layers`` conv2d + bias + relu blocks: one merged region whose TVM-generated symbol
    names every fused op (hundreds of characters)."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64, 56, 56), "float32"))
    w = relax.Var("w", relax.TensorType((64, 64, 3, 3), "float32"))
    b = relax.Var("b", relax.TensorType((1, 64, 1, 1), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = x
            for _ in range(layers):
                y = bb.emit(relax.op.nn.relu(relax.op.add(relax.op.nn.conv2d(y, w, padding=1), b)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return tvm.IRModule(bb.get().functions)


@pytest.mark.parametrize("execution", ["t10", "vgm"])
def test_capacity_error_names_the_composite_its_tensor_the_chip_and_the_budget(execution):
    import tvm_icca
    from runtime_sim.contract.errors import PlanNotFoundError

    mod = _conv_stack(4)
    hw = small_chip(4, 16 * 1024)
    (region,) = tvm_icca.icca_regions(tvm_icca.partition_for_icca(mod, hw))
    # TVM names the region after its 12 composites; partitioning shortens it
    assert len(region) <= 60
    with pytest.raises(PlanNotFoundError) as info:
        tvm_icca.compile(mod, hw, execution=execution)
    text = _in_user_words(info.value, "conv2d + bias + relu", "[1, 64, 56, 56] float32",
                          "chip 'icca-4'", str(hw.usable_sram_bytes))
    assert len(text) < 400


def test_no_plan_error_names_the_operator_tensors_chip_and_budget():
    from runtime_sim.contract.errors import PlanNotFoundError
    from runtime_sim.contract.presets import small_chip as chip
    from tvm_icca.plan_search import plan_operator

    hw = chip(4, 16 * 1024)
    expr = builders.matmul(64, 64, 64)  # 16 KiB a tensor: the chip holds each, no plan all three
    with pytest.raises(PlanNotFoundError) as info:
        plan_operator(expr, hw)
    _in_user_words(info.value, "operator 'matmul'", "[64, 64] float32", "chip 'icca-4'",
                   f"budget is {hw.usable_sram_bytes} bytes per core",
                   f"of {hw.sram_bytes_per_core} bytes of SRAM: the {hw.shift_buffer_bytes}-byte "
                   "shift buffer is reserved")


def test_no_plan_error_within_a_caller_budget_says_what_is_outside_it():
    """A budget below the usable SRAM (a caller's ``budget_bytes`` or a region's live
    tensors) is explained as bytes outside the operator's budget, true of both."""
    from runtime_sim.contract.errors import PlanNotFoundError
    from runtime_sim.contract.presets import small_chip as chip
    from tvm_icca.plan_search import plan_operator

    hw = chip(16, 64 * 1024)
    expr = builders.matmul(256, 256, 256)
    budget = 20 * 1024  # each tensor fits the chip, no plan fits all three
    with pytest.raises(PlanNotFoundError) as info:
        plan_operator(expr, hw, budget_bytes=budget)
    _in_user_words(info.value, f"budget is {budget} bytes per core",
                   f"{hw.usable_sram_bytes - budget} more bytes are outside this operator's budget")


def test_device_sram_overflow_names_the_operator_kind_its_tensors_and_the_chip():
    import dataclasses

    from runtime_sim.contract.errors import SramOverflowError

    base = _program()
    long_name = "fused_relax_matmul_relax_add_relax_nn_relu_" * 6 + "icca.op0"
    mm = dataclasses.replace(base.ops[0], name=long_name, label="matmul + bias + relu")
    program = dataclasses.replace(base, ops=(mm, base.ops[1]), hardware={
        **base.hardware, "sram_bytes_per_core": base.hardware["shift_buffer_bytes"] + 64})
    data = program.to_dict()  # the label travels with the program
    texts = []
    for run in (_run_device, _run_timing):
        with pytest.raises(SramOverflowError) as info:
            run(copy.deepcopy(data))
        texts.append(_in_user_words(info.value, "matmul + bias + relu", "'A' [8, 16] float32",
                                    "chip 'icca-16'", "budget of 8256 bytes", "icca.op0"))
    assert texts[0] == texts[1]  # one message, whichever executor refuses the program


def test_model_kept_on_chip_errors_name_the_operator_and_tensor_that_do_not_fit():
    import tvm
    from tvm.script import relax as R

    import tvm_icca
    from runtime_sim.contract.errors import PlanNotFoundError

    # activations: the largest binding of main, by what it computes and the shapes it moves
    with pytest.raises(PlanNotFoundError) as info:
        tvm_icca.compile(_conv_stack(2), small_chip(4, 16 * 1024), state="chip")
    _in_user_words(info.value, "chip 'icca-4'", "conv2d + bias + relu (x2)",
                   "writing [1, 64, 56, 56] float32", "8192 are usable")

    @tvm.script.ir_module
    class Mlp:
        @R.function
        def main(x: R.Tensor((8, 64), "float32"), w1: R.Tensor((64, 1024), "float32"),
                 w2: R.Tensor((1024, 64), "float32")):
            with R.dataflow():
                z = R.matmul(R.nn.relu(R.matmul(x, w1)), w2)
                R.output(z)
            return z

    # weights kept on chip: the operator whose state takes the most, with its tensor
    hw = small_chip(16, 32 * 1024)
    with pytest.raises(PlanNotFoundError) as info:
        tvm_icca.compile(Mlp, hw, state="chip", resident=["w1", "w2"])
    _in_user_words(info.value, "chip 'icca-16'", "matmul + relu", "'w1' [64, 1024] float32",
                   "bytes per core left for the model")
