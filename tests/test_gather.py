"""Embedding lookups on the chip (tvm_icca.ops.gather, runtime_sim.contract.expr.Gather).

``relax.take(table, ids, axis)`` is converted from TVM's own TE, run on the functional device
under random valid plans against numpy, its data movement counted exactly from the ids by the
device and estimated (uniform ids) by the timing simulator, both checked against a closed
form; an ONNX embedding block (token + position Gather, Add, LayerNormalization) compiles to
one region and matches onnx.reference.ReferenceEvaluator and TVM's llvm build.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import tvm
import tvm.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tvm import relax

import tvm_icca
from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.expr import Gather, gather_rows
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.contract.relayout import canonical_grid, gather_relayout, input_boxes
from runtime_sim.contract.validation import validate_program
from runtime_sim.functional.device import SimulatedDevice
from runtime_sim.timing import simulate_timing
from tvm_icca.lower.te_to_expr import extract_op
from tvm_icca.partition.partitioner import partition_report
from tvm_icca.testing.device_runs import reference_build

HW16 = small_chip(16)
RNG = np.random.default_rng(11)


def _take(table_shape, ids_shape, axis=0, mode="fast", ids_dtype="int64") -> relax.Function:
    bb = relax.BlockBuilder()
    table = relax.Var("table", relax.TensorType(table_shape, "float32"))
    ids = relax.Var("ids", relax.TensorType(ids_shape, ids_dtype))
    with bb.function("f", [table, ids]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.take(table, ids, axis=axis, mode=mode))
        bb.emit_func_output(out)
    return bb.get()["f"]


def _program(extracted, plan, hw=HW16) -> DeviceProgram:
    expr = extracted.expr
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype) for t in expr.inputs)
    op = OpProgram("op0", expr, plan, tuple(t.name for t in expr.inputs), expr.output.name)
    return DeviceProgram("r0", hw.to_dict(), decls, (expr.output.name,), (op,))


def _reference(table, ids, axis, mode):
    return np.take(table, ids, axis=axis, mode="raise" if mode == "fast" else mode)


# -- tensor expressions ------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["fast", "clip", "wrap"])
def test_take_te_becomes_a_gathered_access(mode: str) -> None:
    expr = extract_op(_take((10, 4), (2, 3), mode=mode)).expr
    table, ids = expr.inputs
    assert table.gather == Gather(ids=1, axis=0, mode=mode)
    assert expr.access_shape(0) == (2, 3, 4) == expr.output.shape
    assert table.indices == expr.output.indices and ids.indices == expr.output.indices[:2]
    assert expr.kind == "elementwise" and not expr.reduce_axes
    again = type(expr).from_dict(json.loads(json.dumps(expr.to_dict())))
    assert again == expr


def test_gather_rows_follow_onnx_and_topi_modes() -> None:
    ids = np.array([-3, -1, 0, 2, 4, 7])
    np.testing.assert_array_equal(gather_rows(ids[:5], 5, "fast"), [2, 4, 0, 2, 4])
    np.testing.assert_array_equal(gather_rows(ids, 5, "clip"), [0, 0, 0, 2, 4, 4])
    np.testing.assert_array_equal(gather_rows(ids, 5, "wrap"), np.mod(ids, 5))
    with pytest.raises(DeviceProgramError, match="outside"):
        gather_rows(ids, 5, "fast")


# -- functional device under random plans ------------------------------------------------------
@st.composite
def _take_case(draw):
    rank = draw(st.integers(1, 3))
    table = tuple(draw(st.integers(1, 7)) for _ in range(rank))
    axis = draw(st.integers(0, rank - 1))
    ids_shape = tuple(draw(st.integers(1, 5)) for _ in range(draw(st.integers(1, 2))))
    mode = draw(st.sampled_from(["fast", "clip", "wrap"]))
    n = table[axis]
    lo, hi = (-n, n - 1) if mode == "fast" else (-3 * n, 3 * n)
    ids = np.asarray(draw(st.lists(st.integers(lo, hi), min_size=int(np.prod(ids_shape)),
                                   max_size=int(np.prod(ids_shape)))), np.int64).reshape(ids_shape)
    dtype = draw(st.sampled_from(["int64", "int32"]))
    return table, axis, ids.astype(dtype), mode


@settings(max_examples=30, deadline=None)
@given(case=_take_case(), data=st.data())
def test_take_on_random_plans_matches_numpy(exprs, case, data) -> None:
    table_shape, axis, ids, mode = case
    extracted = extract_op(_take(table_shape, ids.shape, axis, mode, str(ids.dtype)))
    plan = exprs.random_plan(data.draw, extracted.expr, 16, core_order=data.draw(st.booleans()))
    table = RNG.standard_normal(table_shape).astype(np.float32)
    args = [[table, ids][p] for p in extracted.param_of_input]
    (out,) = SimulatedDevice().run(_program(extracted, plan), args)
    np.testing.assert_array_equal(out, _reference(table, ids, axis, mode))


def test_fast_mode_refuses_ids_outside_the_table() -> None:
    extracted = extract_op(_take((6, 4), (3,)))
    program = _program(extracted, ExecutionPlan({}, ({}, {}, {})))
    with pytest.raises(DeviceProgramError, match="gather id 6 is outside"):
        SimulatedDevice().run(program, [np.zeros((6, 4), np.float32), np.array([0, 6, 1])])


def test_program_checks_of_a_gather() -> None:
    extracted = extract_op(_take((6, 4), (3,)))
    good = _program(extracted, ExecutionPlan({}, ({}, {}, {})))
    validate_program(DeviceProgram.from_json(good.to_json()))
    data = json.loads(good.to_json())
    data["version"] = 3  # a gather is a version-4 feature: an older program cannot carry one
    with pytest.raises(DeviceProgramError, match="version 4"):
        validate_program(DeviceProgram.from_dict(data))
    data = json.loads(good.to_json())
    data["inputs"][1]["dtype"] = "float32"
    data["ops"][0]["expr"]["inputs"][1]["dtype"] = "float32"
    with pytest.raises(DeviceProgramError, match="not one of int32, int64"):
        validate_program(DeviceProgram.from_dict(data))
    data = json.loads(good.to_json())
    data["ops"][0]["expr"]["inputs"][0]["gather"]["mode"] = "nan"
    with pytest.raises(DeviceProgramError, match="unknown gather mode"):
        validate_program(DeviceProgram.from_dict(data))


# -- data movement: exact from the ids, estimated without them ---------------------------------
V, H, T = 64, 8, 32  # vocabulary rows, hidden size, tokens


def _embedding_program(P: int, F: int) -> DeviceProgram:
    """A table produced on chip (relu of a host tensor) split by rows over P cores, then looked
    up by T ids with the tokens split over F cores."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((V, H), "float32"))
    with bb.function("g", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(out)
    relu = extract_op(bb.get()["g"]).expr
    take = extract_op(_take((V, H), (T,)))
    rows, tokens = relu.axes[0].name, take.expr.axes[0].name
    reads = tuple(("table", "ids")[p] for p in take.param_of_input)
    ops = (
        OpProgram("table", relu, ExecutionPlan({rows: P}, ({}, {})), ("x",), "table"),
        OpProgram("lookup", take.expr, ExecutionPlan({tokens: F}, ({}, {}, {})), reads, "out"),
    )
    decls = (TensorDecl("x", (V, H), "float32"), TensorDecl("ids", (T,), "int64"))
    return DeviceProgram("r0", HW16.to_dict(), decls, ("out",), ops)


@pytest.mark.parametrize("P, F", [(1, 4), (4, 4), (2, 8), (8, 2), (16, 16)])
def test_gather_bytes_closed_form(P: int, F: int) -> None:
    """Core c holds T/F tokens and, for c < P, table rows [c V/P, (c+1) V/P). With every
    core's ids spread evenly over the P row blocks, a 1/P share of its rows is local:
    4 H T - min(P, F) (T/F) (1/P) 4 H bytes move. The timing simulator (ids unknown:
    uniform) estimates exactly that; the functional device counts it from the ids."""
    want = 4 * H * T - min(P, F) * (T / F) / P * 4 * H
    program = _embedding_program(P, F)
    report = simulate_timing(program)
    moved = {op.name: op.relayout_bytes for op in report.per_op}
    assert moved["lookup"] == pytest.approx(want)
    # ids that visit every row block equally often on every core (block-cyclic)
    ids = (np.arange(T) % P) * (V // P) + (np.arange(T) // P) % (V // P)
    x = RNG.standard_normal((V, H)).astype(np.float32)
    device = SimulatedDevice()
    (out,) = device.run(program, [x, ids.astype(np.int64)])
    np.testing.assert_array_equal(out, np.maximum(x, 0)[ids])
    lookup = device.last_run_stats(timing=False)["regions"][0]["ops"][1]
    assert lookup["gather_bytes"] == pytest.approx(want)
    assert lookup["gather_bytes"] + lookup["gather_local_bytes"] == 4 * H * T


def test_uniform_estimate_matches_random_ids_on_average() -> None:
    """Random ids move, on average over draws, what the uniform estimate says."""
    layout = OpLayout(extract_op(_take((V, H), (T,))).expr, ExecutionPlan({"ax0": 8}, ({}, {}, {})))
    boxes = input_boxes(layout, 0)
    grid = canonical_grid((V, H), 4, 16)  # a table resting spread over 16 cores
    chips = np.zeros(16, np.int64)
    estimate = gather_relayout(grid, boxes, 0, chips, 1).moved_bytes
    draws = [gather_relayout(grid, boxes, 0, chips, 1, RNG.integers(0, V, T)).moved_bytes
             for _ in range(200)]
    assert np.mean(draws) == pytest.approx(estimate, rel=0.02)


def test_hbm_table_reads_only_the_gathered_rows() -> None:
    """A 50k x 4096 vocabulary in HBM: the lookup of 16 tokens reads 16 rows, not the table."""
    hw = small_chip(16).with_overrides(hbm_bandwidth=1e11, hbm_controllers=2)
    take = extract_op(_take((50_000, 4096), (16,)))
    tokens, hidden = (a.name for a in take.expr.axes)
    expr = take.expr
    plan = ExecutionPlan({tokens: 4, hidden: 4}, ({}, {}, {}))
    decls = (TensorDecl(expr.inputs[0].name, (50_000, 4096), "float32", "hbm"),
             TensorDecl(expr.inputs[1].name, (16,), "int64"))
    op = OpProgram("op0", expr, plan, tuple(t.name for t in expr.inputs), expr.output.name)
    report = simulate_timing(DeviceProgram("r0", hw.to_dict(), decls, (expr.output.name,), (op,)))
    assert report.per_op[0].hbm_bytes == pytest.approx(16 * 4096 * 4)


# -- ONNX: token + position embeddings, add, layer norm -> one region ---------------------------
def _embedding_block(vocab: int = 50, positions: int = 16, hidden: int = 32, seq: int = 8):
    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.standard_normal((vocab, hidden)).astype(np.float32), "wte"),
        numpy_helper.from_array(rng.standard_normal((positions, hidden)).astype(np.float32), "wpe"),
        numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("Gather", ["wte", "input_ids"], ["tok"], axis=0),
        helper.make_node("Gather", ["wpe", "position_ids"], ["pos"], axis=0),
        helper.make_node("Add", ["tok", "pos"], ["emb"]),
        helper.make_node("LayerNormalization", ["emb", "gamma", "beta"], ["out"], axis=-1,
                         epsilon=1e-5),
    ]
    graph = helper.make_graph(
        nodes, "embeddings",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, seq, hidden])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _vm(ex, *args):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()


def test_onnx_embeddings_add_layer_norm_are_one_region() -> None:
    model = _embedding_block()
    ids = RNG.integers(-50, 50, (1, 8)).astype(np.int64)  # negative ids count from the end
    positions = np.arange(8, dtype=np.int64)[None, :]
    mod = tvm_icca.load_onnx(model)
    report = partition_report(tvm_icca.partition_for_icca(mod, HW16))
    assert "relax.take" not in report["host_ops"], report["host_reasons"]
    float_regions = [r for r in report["regions"] if "icca.take" in r["composites"]]
    assert len(float_regions) == 1
    assert {"icca.take", "icca.add", "icca.layer_norm"} <= set(float_regions[0]["composites"])
    (want,) = ReferenceEvaluator(model).run(None, {"input_ids": ids, "position_ids": positions})
    with tvm_icca.use_hardware(HW16):
        got = _vm(tvm.compile(mod, target="icca"), ids, positions)
    cpu = _vm(reference_build(mod), ids, positions)
    tvm.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    tvm.testing.assert_allclose(got, cpu, rtol=1e-4, atol=1e-4)
