"""View ops on the chip (tvm_icca.ops.views): reshape, flatten, permute_dims, expand_dims, squeeze,
broadcast_to as re-layouts, on the functional device, in the timing simulator, and an
attention block exported the PyTorch way compiled as one region."""

from __future__ import annotations

import random

import numpy as np
import pytest
import tvm
import tvm.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import relax

import tvm_icca
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.functional.device import SimulatedDevice
from runtime_sim.timing import simulate_timing
from tvm_icca.lower.te_to_expr import extract_op
from tvm_icca.ops.views import reshape_atoms
from tvm_icca.testing.exprs import random_plan
from tvm_icca.testing.device_runs import reference_build

op = relax.op
HW16 = small_chip(16)
RNG = np.random.default_rng(11)


def rfunc(shape, body, dtype="float32", name="f") -> relax.Function:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function(name, [x]):
        with bb.dataflow():
            out = bb.emit_output(body(x))
        bb.emit_func_output(out)
    return bb.get()[name]


def one_op_program(expr, plan, hw, name="op0") -> DeviceProgram:
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype) for t in expr.inputs)
    ops = (OpProgram(name, expr, plan, tuple(t.name for t in expr.inputs), expr.output.name),)
    return DeviceProgram("r0", hw.to_dict(), decls, (expr.output.name,), ops)


# -- which reshapes are re-layouts ----------------------------------------------------------------
@pytest.mark.parametrize("src, dst, atoms", [
    ((2, 3, 20), (2, 3, 4, 5), ((2,), (3,), (4,), (5,))),          # split the heads
    ((2, 3, 4, 5), (2, 3, 20), ((2,), (3,), (4, 5))),              # merge them back
    ((4, 8), (8, 4), ((4, 2), (4,))),                              # split 8 = 2x4, merge 4x2
    ((2, 3, 4), (24,), ((2, 3, 4),)),                              # flatten
    ((1, 6), (2, 1, 3), ((2,), (1,), (3,))),                       # unit dims come and go
    ((1, 1), (), ()),                                              # to a scalar
    ((6, 4), (4, 6), None),                                        # rows straddle rows
    ((2, 6), (3, 4), None),
])
def test_reshape_atoms(src, dst, atoms) -> None:
    assert reshape_atoms(src, dst) == atoms
    if atoms is not None:  # every output dim is the row-major merge of its atoms
        assert [int(np.prod(a)) for a in atoms] == [d for d in dst]


# -- each view op on the functional device, with random plans ------------------------------------
VIEWS = {
    "transpose_heads": ((2, 3, 4, 5), lambda x: op.permute_dims(x, [0, 2, 1, 3]),
                        lambda x: x.transpose(0, 2, 1, 3)),
    "transpose_keys": ((2, 3, 4, 5), lambda x: op.permute_dims(x, [0, 2, 3, 1]),
                       lambda x: x.transpose(0, 2, 3, 1)),
    "reshape_split": ((2, 3, 20), lambda x: op.reshape(x, (2, 3, 4, 5)), lambda x: x.reshape(2, 3, 4, 5)),
    "reshape_merge": ((2, 3, 4, 5), lambda x: op.reshape(x, (2, 3, 20)), lambda x: x.reshape(2, 3, 20)),
    "reshape_split_merge": ((4, 8), lambda x: op.reshape(x, (8, 4)), lambda x: x.reshape(8, 4)),
    "reshape_unit_dims": ((1, 6), lambda x: op.reshape(x, (2, 1, 3, 1)), lambda x: x.reshape(2, 1, 3, 1)),
    "flatten": ((3, 4, 5), op.flatten, lambda x: x.reshape(-1)),
    "expand_dims": ((3, 5), lambda x: op.expand_dims(x, [1]), lambda x: x[:, None]),
    "squeeze": ((3, 1, 5), lambda x: op.squeeze(x, [1]), lambda x: x[:, 0]),
    "broadcast_to": ((3, 1), lambda x: op.broadcast_to(x, (4, 3, 5)), lambda x: np.broadcast_to(x, (4, 3, 5))),
    "repeat": ((3, 4), lambda x: op.repeat(x, 3, axis=1), lambda x: np.repeat(x, 3, axis=1)),
    "repeat_twice": ((2, 3, 2), lambda x: op.repeat(op.repeat(x, 2, axis=0), 3, axis=-1),
                     lambda x: np.repeat(np.repeat(x, 2, axis=0), 3, axis=-1)),
    "repeat_one_axis_twice": ((3, 2), lambda x: op.repeat(op.repeat(x, 2, axis=1), 3, axis=1),
                              lambda x: np.repeat(np.repeat(x, 2, axis=1), 3, axis=1)),
}


@pytest.mark.parametrize("name", list(VIEWS))
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_view_op_on_the_device_matches_numpy(exprs, name, data) -> None:
    shape, build, ref = VIEWS[name]
    expr = extract_op(rfunc(shape, build)).expr
    assert expr.kind == "elementwise" and not expr.reduce_axes
    plan = exprs.random_plan(data.draw, expr, HW16.num_cores, core_order=True)
    x = RNG.standard_normal(shape).astype(np.float32)
    (y,) = SimulatedDevice(HW16).run(one_op_program(expr, plan, HW16), [x])
    assert np.array_equal(y, ref(x))  # data only moves: exact


def test_repeat_reads_its_input_through_plain_axes() -> None:
    """``x[h // r]`` with ``h = h0*r + h1`` is ``x[h0]``: an affine read, no gather."""
    expr = extract_op(rfunc((2, 3), lambda x: op.repeat(op.repeat(x, 2, axis=0), 4, axis=1))).expr
    (x,) = expr.inputs
    assert x.gather is None and all(i.is_simple for i in x.indices)
    assert [len(i.terms) for i in expr.output.indices] == [2, 2]
    assert [a.extent for a in expr.axes] == [2, 2, 3, 4]


def test_merge_reshape_plans_split_only_the_outer_axis() -> None:
    expr = extract_op(rfunc((2, 3, 4, 5), lambda x: op.reshape(x, (2, 3, 20)))).expr
    plans = [random_plan(random.Random(s).choice, expr, HW16.num_cores) for s in range(30)]
    assert all(p.F("ax2_1") == 1 for p in plans) and any(p.F("ax2_0") > 1 for p in plans)


# -- timing: a transpose is a re-layout with a closed form ---------------------------------------
def test_transpose_relayout_bytes_match_the_closed_form(exprs) -> None:
    """Rows of an N x N tensor on P cores -> its transpose, rows on the same P cores: core c
    needs columns c*N/P.. of every row (N*N/P elements) and holds the (N/P)^2 of them that
    sit in its own rows, so N^2 (1 - 1/P) elements cross the chip; the next operator, split
    by rows like the transpose's output, receives nothing."""
    N, P, item = 16, 4, 4
    rows = exprs.bias_add(N, N)  # Y[i, j] = X[i, j] + b[j]
    transpose = extract_op(rfunc((N, N), lambda x: op.permute_dims(x, [1, 0]))).expr
    ops = (
        OpProgram("rows", rows, ExecutionPlan({"i": P}, ({}, {}, {})), ("X", "b"), "Y"),
        OpProgram("t", transpose, ExecutionPlan({"ax0": P}, ({}, {})), ("Y",), "T"),
        OpProgram("next", rows, ExecutionPlan({"i": P}, ({}, {}, {})), ("T", "b"), "Z"),
    )
    decls = (TensorDecl("X", (N, N), "float32"), TensorDecl("b", (1, N), "float32"))
    program = DeviceProgram("tr", HW16.to_dict(), decls, ("Z",), ops)
    report = simulate_timing([program])
    assert report.per_op[1].relayout_bytes == N * N * (1 - 1 / P) * item
    assert report.per_op[2].relayout_bytes == 0
    x, b = RNG.standard_normal((N, N)).astype(np.float32), RNG.standard_normal((1, N)).astype(np.float32)
    (z,) = SimulatedDevice(HW16).run(program, [x, b])
    tvm.testing.assert_allclose(z, (x + b).T + b, rtol=1e-6)


# -- partitioning ---------------------------------------------------------------------------------
def _module(shape, body, dtype="float32") -> tvm.IRModule:
    return tvm.IRModule({"main": rfunc(shape, body, dtype, name="main")})


def test_view_between_two_matmuls_stays_on_the_chip() -> None:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    w = relax.Var("w", relax.TensorType((8, 8), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(op.matmul(x, w))
            r = bb.emit(op.reshape(y, (4, 2, 4)))
            t = bb.emit(op.permute_dims(r, [1, 0, 2]))  # [2, 4, 4]
            out = bb.emit_output(op.matmul(t, t))
        bb.emit_func_output(out)
    part = tvm_icca.partition_for_icca(bb.get())
    report = tvm_icca.partition_report(part)
    assert report["host_ops"] == {} and len(tvm_icca.icca_regions(part)) == 1


def test_reshape_that_is_no_relayout_stays_on_the_host_with_a_reason() -> None:
    part = tvm_icca.partition_for_icca(_module((6, 4), lambda x: op.nn.relu(op.reshape(x, (4, 6)))))
    report = tvm_icca.partition_report(part)
    assert report["host_ops"] == {"relax.reshape": 1}
    (reason,) = report["host_reasons"]["relax.reshape"]
    assert "[6, 4] -> [4, 6]" in reason and "not a re-layout" in reason


def test_integer_shape_tensors_stay_on_the_host() -> None:
    part = tvm_icca.partition_for_icca(_module((2, 6), lambda x: op.reshape(x, (2, 2, 3)), "int64"))
    report = tvm_icca.partition_report(part)
    assert report["host_ops"] == {"relax.reshape": 1} and not tvm_icca.icca_regions(part)


# -- an attention block exported the PyTorch way --------------------------------------------------
B, S, E, H = 2, 4, 8, 2
D = E // H


def _attention_onnx():
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal(a).astype(np.float32) * 0.3, n)
             for n, a in [("Wq", (E, E)), ("Wk", (E, E)), ("Wv", (E, E)), ("Wo", (E, E)),
                          ("bq", (E,)), ("bk", (E,)), ("bv", (E,)), ("bo", (E,))]]
    inits += [numpy_helper.from_array(np.array([B, S, H, D], np.int64), "heads"),
              numpy_helper.from_array(np.array([B, S, E], np.int64), "merged"),
              numpy_helper.from_array(np.array(np.sqrt(D), np.float32), "scale")]
    nodes = []
    for p, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [helper.make_node("MatMul", ["x", f"W{p}"], [f"{p}0"]),
                  helper.make_node("Add", [f"{p}0", f"b{p}"], [f"{p}1"]),
                  helper.make_node("Reshape", [f"{p}1", "heads"], [f"{p}2"]),
                  helper.make_node("Transpose", [f"{p}2"], [f"{p}3"], perm=perm)]
    nodes += [helper.make_node("MatMul", ["q3", "k3"], ["s0"]),
              helper.make_node("Div", ["s0", "scale"], ["s1"]),
              helper.make_node("Add", ["s1", "mask"], ["s2"]),
              helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v3"], ["o0"]),
              helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o1", "merged"], ["o2"]),
              helper.make_node("MatMul", ["o2", "Wo"], ["o3"]),
              helper.make_node("Add", ["o3", "bo"], ["y"])]
    graph = helper.make_graph(
        nodes, "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, E]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [B, 1, 1, S])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, E])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_attention_block_is_one_region_and_matches_references() -> None:
    from onnx.reference import ReferenceEvaluator

    model = _attention_onnx()
    x = RNG.standard_normal((B, S, E)).astype(np.float32)
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[1, ..., -1] = -1e4  # the last key of the second sequence is padding
    want = ReferenceEvaluator(model).run(None, {"x": x, "mask": mask})[0]

    mod = tvm_icca.load_onnx(model)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, HW16))
    assert report["host_ops"] == {}  # no float compute and no layout op on the host
    assert len(report["regions"]) == 1
    assert {"relax.reshape", "relax.permute_dims", "relax.nn.softmax"} <= set(report["offloaded_ops"])

    args = [tvm.runtime.tensor(x), tvm.runtime.tensor(mask)]
    with tvm_icca.use_hardware(HW16):
        got = relax.VirtualMachine(tvm.compile(mod, target="icca"), tvm.cpu())["main"](*args).numpy()
    stats = tvm_icca.last_run_stats()
    assert stats["regions_executed"] == 1 and stats["host_placed_bytes"] > 0
    cpu = relax.VirtualMachine(reference_build(mod), tvm.cpu())["main"](*args).numpy()
    tvm.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    tvm.testing.assert_allclose(got, cpu, rtol=1e-4, atol=1e-5)


def test_every_view_op_joins_the_region_of_its_neighbours() -> None:
    def body(x):
        y = op.nn.relu(x)  # [3, 1, 4]
        y = op.squeeze(op.broadcast_to(op.expand_dims(y, [0]), (2, 3, 1, 4)), [2])  # [2, 3, 4]
        y = op.flatten(op.permute_dims(y, [2, 0, 1]))  # [24]
        return op.nn.relu(op.reshape(y, (4, 6)))

    mod = _module((3, 1, 4), body)
    part = tvm_icca.partition_for_icca(mod, HW16)
    report = tvm_icca.partition_report(part)
    assert report["host_ops"] == {} and len(report["regions"]) == 1
    assert set(VIEWS_OPS_USED) <= set(report["offloaded_ops"])
    x = RNG.standard_normal((3, 1, 4)).astype(np.float32)
    with tvm_icca.use_hardware(HW16):
        got = relax.VirtualMachine(tvm.compile(mod, target="icca"), tvm.cpu())["main"](tvm.runtime.tensor(x))
    want = np.maximum(np.broadcast_to(np.maximum(x, 0)[None], (2, 3, 1, 4))[:, :, 0].transpose(2, 0, 1)
                      .reshape(4, 6), 0)
    np.testing.assert_array_equal(got.numpy(), want)


VIEWS_OPS_USED = ("relax.expand_dims", "relax.broadcast_to", "relax.squeeze", "relax.permute_dims",
                  "relax.flatten", "relax.reshape")
