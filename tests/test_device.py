"""The functional simulated device (runtime_sim.functional.device) against numpy references."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.contract.constants import decode_constant, encode_constant
from runtime_sim.contract.errors import (
    DeviceProgramError,
    InvalidPlanError,
    SramOverflowError,
    UnsupportedDtypeError,
)
from runtime_sim.contract.expr import Axis, TensorAccess, TensorExpr
from runtime_sim.contract.layout import OpLayout, ShiftEvent
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.contract.validation import validate_program
from runtime_sim.functional.device import SimulatedDevice, get_device
from runtime_sim.functional.link_hops import LinkHops
from tvm_icca.testing.relayout_reference import received_bytes

RNG = np.random.default_rng(1)


# -- helpers ----------------------------------------------------------------------------------
def program(expr: TensorExpr, plan: ExecutionPlan, hw, name: str = "op0", region: str = "r0") -> DeviceProgram:
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype) for t in expr.inputs)
    op = OpProgram(name, expr, plan, tuple(t.name for t in expr.inputs), expr.output.name)
    return DeviceProgram(region, hw.to_dict(), decls, (expr.output.name,), (op,))


def data_for(expr: TensorExpr) -> list[np.ndarray]:
    return [RNG.standard_normal(t.shape).astype(t.dtype) for t in expr.inputs]


def conv_ref(x: np.ndarray, w: np.ndarray, s: int, p: int, d: int) -> np.ndarray:
    B, C, H, W = x.shape
    O, _, KH, KW = w.shape
    OH = (H + 2 * p - d * (KH - 1) - 1) // s + 1
    OW = (W + 2 * p - d * (KW - 1) - 1) // s + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    out = np.zeros((B, O, OH, OW))
    for kh in range(KH):
        for kw in range(KW):
            patch = xp[:, :, kh * d: kh * d + s * (OH - 1) + 1: s, kw * d: kw * d + s * (OW - 1) + 1: s]
            out += np.einsum("bchw,oc->bohw", patch, w[:, :, kh, kw].astype(np.float64))
    return out


def softmax_ref(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def reference(expr: TensorExpr, args: list[np.ndarray], conv: tuple[int, int, int] | None = None) -> np.ndarray:
    a = [x.astype(np.float64) for x in args]
    kind, inputs = expr.kind, expr.inputs
    if kind == "conv2d":
        return conv_ref(args[0], args[1], *conv)
    if kind == "matmul":
        transposed = inputs[1].indices[-1].axes == ("k",)
        b = np.swapaxes(a[1], -1, -2) if transposed else a[1]
        out = a[0] @ b
        if expr.epilogue is not None:
            out = np.maximum(out + a[2], 0.0)
        return out
    if kind == "elementwise":
        return a[0] + a[1]
    if kind == "softmax":
        return softmax_ref(a[0])
    if kind == "reduce":
        return a[0].mean(axis=1) if expr.epilogue is not None else a[0].sum(axis=1)
    raise AssertionError(kind)


def check_stats(dev: SimulatedDevice, layout: OpLayout, hw) -> None:
    stats = dev.last_run_stats()
    assert stats["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core
    assert stats["peak_sram_bytes_per_core"] == layout.memory_bytes_per_core() + hw.shift_buffer_bytes
    assert stats["rotation_bytes"] == layout.shift_bytes()
    # the replica reduction's bytes are those of the schedule it runs (a reduce-scatter sends
    # more than the tree's or the chain's R - 1 partitions that layout.reduction_bytes counts)
    out = len(layout.expr.tensors) - 1
    tree = layout.num_cores // layout.replicas(out) * (layout.replicas(out) - 1) * layout.replica_bytes()
    placed = OpLayout(layout.expr, layout.plan, hw.cores_per_chip)
    reduction = layout.reduction_bytes() - tree + LinkHops(hw).reduction_sent_bytes(placed)
    assert stats["reduction_bytes"] == reduction
    assert stats["shift_bytes"] == layout.shift_bytes() + reduction
    assert stats["steps"] == layout.steps and stats["cores_used"] == layout.num_cores


def run_single(expr, plan, hw, conv=None, rtol=1e-4, atol=1e-4):
    dev = SimulatedDevice()
    args = data_for(expr)
    (out,) = dev.run(program(expr, plan, hw), args)
    assert out.dtype == np.dtype(expr.output.dtype) and out.shape == expr.output.shape
    np.testing.assert_allclose(out.astype(np.float64), reference(expr, args, conv), rtol=rtol, atol=atol)
    check_stats(dev, OpLayout(expr, plan), hw)
    return dev


HW16 = small_chip(16)


# -- fixed plans --------------------------------------------------------------------------------
MATMUL_PLANS = [
    ({}, ({}, {}, {}), ()),
    ({"m": 3, "n": 3}, ({"k": 3}, {"k": 3}, {}), ()),  # T10 Fig. 10: Cannon on 3x3 cores
    ({"m": 2, "n": 4, "k": 2}, ({"k": 4}, {"k": 2}, {}), ()),  # unequal f_t on k
    ({"m": 2, "n": 2, "k": 4}, ({}, {}, {}), ()),  # split reduction: replicas of C
    ({"m": 4, "n": 2, "k": 2}, ({"k": 2}, {"k": 4}, {}), ()),
    ({"m": 2, "k": 2}, ({}, {"n": 2}, {}), ()),  # B rotates on n: C is computed in n-chunks
]


@pytest.mark.parametrize("F, temporal, order", MATMUL_PLANS)
def test_matmul(exprs, F, temporal, order) -> None:
    e = exprs.matmul(7, 10, 9)
    plan = ExecutionPlan(F, temporal, order)
    try:
        OpLayout(e, plan).validate()
    except Exception as err:  # a plan that is not valid here is a test bug
        raise AssertionError(f"test plan invalid: {err}")
    run_single(e, plan, HW16)


def test_batched_and_transposed_matmul(exprs) -> None:
    e = exprs.matmul(5, 6, 4, batch=3)
    run_single(e, ExecutionPlan({"b": 3, "m": 2, "n": 2}, ({"k": 2}, {"k": 2}, {})), HW16)
    e = exprs.matmul(6, 8, 5, transpose_b=True)
    run_single(e, ExecutionPlan({"m": 2, "n": 4}, ({"k": 4}, {"k": 2}, {}), ("k",)), HW16)


@pytest.mark.parametrize("stride, pad, dilation", [(1, 0, 1), (2, 1, 1), (1, 2, 2), (3, 1, 2)])
def test_conv2d(exprs, stride, pad, dilation) -> None:
    e = exprs.conv2d(2, 4, 9, 8, 6, 3, 3, stride=stride, pad=pad, dilation=dilation)
    plans = [
        ExecutionPlan({}, ({}, {}, {})),
        ExecutionPlan({"o": 2, "y": 2, "c": 2}, ({"c": 2}, {"c": 2}, {})),  # rotate channels
        ExecutionPlan({"b": 2, "x": 2, "kh": 3}, ({}, {"o": 4}, {})),  # split kernel rows
    ]
    for plan in plans:
        OpLayout(e, plan).validate()
        run_single(e, plan, HW16, conv=(stride, pad, dilation))


def test_bias_add_broadcast(exprs) -> None:
    e = exprs.bias_add(6, 10)
    run_single(e, ExecutionPlan({"i": 3, "j": 4}, ({}, {"j": 3}, {})), HW16)


def test_softmax_with_local_axes(exprs) -> None:
    e = exprs.softmax(7, 12)
    run_single(e, ExecutionPlan({"i": 3}, ({}, {})), HW16, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mean", [False, True])
def test_row_sum_and_mean(exprs, mean) -> None:
    e = exprs.row_sum(5, 11, mean=mean)
    run_single(e, ExecutionPlan({"i": 2, "k": 3}, ({}, {})), HW16)
    run_single(e, ExecutionPlan({"i": 5, "k": 1}, ({"k": 1}, {})), HW16)


def test_matmul_bias_relu_epilogue(exprs) -> None:
    e = exprs.matmul_bias_relu(6, 8, 10)
    run_single(e, ExecutionPlan({"m": 2, "n": 2, "k": 2}, ({"k": 2}, {"k": 2}, {}, {})), HW16)


def test_float16(exprs) -> None:
    e = exprs.matmul_bias_relu(6, 8, 10, dtype="float16")
    run_single(e, ExecutionPlan({"m": 2, "n": 2}, ({"k": 2}, {"k": 2}, {}, {})), HW16, rtol=2e-2, atol=2e-2)


def test_axis_values_are_global(exprs) -> None:
    """out[i, j] = 100 i + j: every core must see the global position of its chunk."""
    x = TensorAccess("X", (5, 7), "float32", (exprs.ax("i"), exprs.ax("j")))
    y = TensorAccess("Y", (5, 7), "float32", (exprs.ax("i"), exprs.ax("j")))
    body = exprs.op("add", exprs.op("mul", {"op": "axis", "axis": "i"}, exprs.const(100)),
                    {"op": "axis", "axis": "j"})
    body = exprs.op("add", body, exprs.op("mul", exprs.load(0, x.indices), exprs.const(0)))
    e = TensorExpr("elementwise", (Axis("i", 5), Axis("j", 7)), (x,), y, body)
    (out,) = SimulatedDevice().run(program(e, ExecutionPlan({"i": 2, "j": 3}, ({}, {})), HW16),
                                   [np.ones((5, 7), np.float32)])
    np.testing.assert_array_equal(out, 100 * np.arange(5)[:, None] + np.arange(7))


def test_scalar_output_total_sum(exprs) -> None:
    """Y[] = 2 * sum_{i,k} X[i,k]: both axes reduce, the output is a 0-d tensor."""
    x = TensorAccess("X", (5, 7), "float32", (exprs.ax("i"), exprs.ax("k")))
    y = TensorAccess("Y", (), "float32", ())
    e = TensorExpr("reduce", (Axis("i", 5, True), Axis("k", 7, True)), (x,), y,
                   exprs.load(0, x.indices), epilogue=exprs.op("mul", {"op": "result"}, exprs.const(2)))
    a = RNG.standard_normal((5, 7)).astype(np.float32)
    for plan in [ExecutionPlan({}, ({}, {})), ExecutionPlan({"i": 2, "k": 3}, ({}, {}))]:
        (out,) = SimulatedDevice().run(program(e, plan, HW16), [a])
        assert isinstance(out, np.ndarray) and out.shape == ()
        np.testing.assert_allclose(out, 2 * a.astype(np.float64).sum(), rtol=1e-5)


# -- random shapes and plans ---------------------------------------------------------------------
def _draw_expr(exprs, draw, kind):
    i = lambda lo, hi: draw(st.integers(lo, hi))  # noqa: E731
    if kind == "matmul":
        return exprs.matmul(i(1, 9), i(1, 12), i(1, 9), transpose_b=draw(st.booleans())), None
    if kind == "bmm":
        return exprs.matmul(i(1, 5), i(1, 6), i(1, 5), batch=i(1, 4)), None
    if kind == "conv":
        s, p, d = i(1, 2), i(0, 2), i(1, 2)
        k = i(1, 3)
        size = max(i(3, 7), d * (k - 1) + 1 - 2 * p)
        return exprs.conv2d(i(1, 2), i(1, 4), size, size, i(1, 4), k, k, s, p, d), (s, p, d)
    if kind == "bias_add":
        return exprs.bias_add(i(1, 9), i(1, 9)), None
    if kind == "softmax":
        return exprs.softmax(i(1, 9), i(1, 9)), None
    if kind == "mean":
        return exprs.row_sum(i(1, 9), i(1, 12), mean=draw(st.booleans())), None
    if kind == "matmul_bias_relu":
        return exprs.matmul_bias_relu(i(1, 8), i(1, 8), i(1, 8)), None
    raise AssertionError(kind)


KINDS = ["matmul", "bmm", "conv", "bias_add", "softmax", "mean", "matmul_bias_relu"]


@settings(max_examples=30, deadline=None)
@given(data=st.data(), kind=st.sampled_from(KINDS), cores=st.sampled_from([4, 8, 16, 32, 64]))
def test_random_valid_plans_match_numpy(exprs, data, kind, cores) -> None:
    e, conv = _draw_expr(exprs, data.draw, kind)
    plan = exprs.random_plan(data.draw, e, cores, core_order=data.draw(st.booleans()))
    hw = small_chip(cores)
    spread = [k for k in (2, 3, 4) if plan.num_cores % k == 0]
    if spread and data.draw(st.booleans()):  # the same plan spread over chips of `cores` cores
        k = data.draw(st.sampled_from(spread))
        plan = dataclasses.replace(plan, chips=k)
        hw = small_chip(cores * k, num_chips=k, inter_chip_bandwidth=64e9)
    run_single(e, plan, hw, conv=conv)


def test_spread_plan_occupies_the_start_of_each_chip(exprs) -> None:
    """A plan on 8 cores spread over 4 chips of 16 cores: two cores at the start of each chip,
    SRAM held there (and nowhere else), the answer unchanged."""
    e = exprs.matmul(8, 8, 8)
    plan = ExecutionPlan({"m": 2, "n": 4}, ({"k": 2}, {"k": 2}, {}), ("k",), chips=4)
    hw = small_chip(64, num_chips=4, inter_chip_bandwidth=64e9)
    layout = OpLayout(e, plan, hw.cores_per_chip)
    np.testing.assert_array_equal(layout.physical, [0, 1, 16, 17, 32, 33, 48, 49])
    dev = SimulatedDevice(hw)
    dev.allocate("mm", layout)
    used = dev.sram_used_per_core() - hw.shift_buffer_bytes
    assert set(np.flatnonzero(used).tolist()) == {0, 1, 16, 17, 32, 33, 48, 49}
    dev.free("mm")
    run_single(e, plan, hw)
    assert ExecutionPlan.from_dict(plan.to_dict()) == plan and plan.to_dict()["chips"] == 4
    assert "chips" not in dataclasses.replace(plan, chips=1).to_dict()
    with pytest.raises(InvalidPlanError, match="spread evenly"):
        OpLayout(e, dataclasses.replace(plan, chips=3), 16)
    with pytest.raises(InvalidPlanError, match="do not fit"):
        OpLayout(e, dataclasses.replace(plan, chips=2), 2)
    with pytest.raises(InvalidPlanError, match="chips"):  # more chips than the system has
        SimulatedDevice().run(program(e, plan, small_chip(64, num_chips=2, inter_chip_bandwidth=64e9)),
                              data_for(e))


# -- the device really moves data ----------------------------------------------------------------
def _drive(dev: SimulatedDevice, layout: OpLayout, args, corrupt_shift=False, corrupt_place=False):
    """Drive allocate/place/compute/shift by hand (T10 §4.4), optionally corrupting one thing."""
    dev.allocate("mm", layout)
    for t, a in enumerate(args):
        dev.place("mm", t, a)
    if corrupt_place:  # swap the initial A partitions of cores 0 and 1
        buf = dev.buffers("mm")[0]
        buf[[0, 1]] = buf[[1, 0]]
    corrupted = False
    for counters, advancing in layout.counters():
        dev.compute("mm", counters)
        for ev in layout.shifts_after(counters, advancing):
            if corrupt_shift and not corrupted:
                src = ev.source.copy()
                src[ev.moving] = np.roll(src[ev.moving], 1)
                ev = ShiftEvent(ev.tensor, ev.axis, src, ev.moving)
                corrupted = True
            dev.shift("mm", ev)
    dev.reduce_outputs("mm")
    out = dev.read_output("mm")
    dev.free("mm")
    return out


@pytest.mark.parametrize("corruption", [None, "shift", "place"])
def test_corruption_changes_answer(exprs, corruption) -> None:
    e = exprs.matmul(6, 6, 6)
    layout = OpLayout(e, ExecutionPlan({"m": 3, "n": 3}, ({"k": 3}, {"k": 3}, {})))
    layout.validate()
    a, b = data_for(e)
    out = _drive(SimulatedDevice(HW16), layout, [a, b],
                 corrupt_shift=corruption == "shift", corrupt_place=corruption == "place")
    close = np.allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert close == (corruption is None)


# -- memory, dtypes, errors ------------------------------------------------------------------------
def test_sram_overflow_names_op(exprs) -> None:
    hw = small_chip(4, sram_bytes_per_core=24 * 1024)
    e = exprs.matmul(64, 64, 64)
    prog = program(e, ExecutionPlan({}, ({}, {}, {})), hw, name="big_mm")
    with pytest.raises(SramOverflowError, match="big_mm") as info:
        SimulatedDevice().run(prog, data_for(e))
    assert info.value.op == "big_mm" and info.value.budget_bytes == 24 * 1024
    assert info.value.needed_bytes == 3 * 64 * 64 * 4 + hw.shift_buffer_bytes
    # the same op split over 4 cores with rotation fits
    plan = ExecutionPlan({"m": 2, "n": 2}, ({"k": 2}, {"k": 2}, {}))
    assert OpLayout(e, plan).memory_bytes_per_core() + hw.shift_buffer_bytes <= hw.sram_bytes_per_core
    SimulatedDevice().run(program(e, plan, hw), data_for(e))


def test_unsupported_dtypes(exprs) -> None:
    hw = small_chip(4, dtypes=("float32",))
    e = exprs.matmul(4, 4, 4, dtype="float16")
    with pytest.raises(UnsupportedDtypeError, match="float16"):
        SimulatedDevice().run(program(e, ExecutionPlan({}, ({}, {}, {})), hw), data_for(e))
    e = exprs.matmul(4, 4, 4)
    with pytest.raises(UnsupportedDtypeError, match="declares float32"):
        SimulatedDevice().run(program(e, ExecutionPlan({}, ({}, {}, {})), hw),
                              [x.astype(np.float64) for x in data_for(e)])


def test_input_errors(exprs) -> None:
    e = exprs.matmul(4, 4, 4)
    prog = program(e, ExecutionPlan({}, ({}, {}, {})), HW16)
    with pytest.raises(DeviceProgramError, match="takes 2 inputs"):
        SimulatedDevice().run(prog, data_for(e)[:1])
    with pytest.raises(DeviceProgramError, match="shape"):
        SimulatedDevice().run(prog, [np.zeros((4, 5), np.float32), np.zeros((4, 4), np.float32)])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", ">f4"])
def test_constant_roundtrip(dtype) -> None:
    x = RNG.standard_normal((3, 5)).astype(dtype)
    entry = encode_constant(x)
    assert set(entry) == {"dtype", "shape", "data"} and entry["shape"] == [3, 5]
    y = decode_constant("w", entry)
    assert y.dtype == np.dtype(x.dtype.name) and entry["dtype"] == x.dtype.name
    assert np.array_equal(y, x)
    with pytest.raises(DeviceProgramError, match="expected"):
        decode_constant("w", dict(entry, shape=[4, 5]))


def test_constants_and_json(exprs) -> None:
    e = exprs.matmul(5, 6, 7)
    a, b = data_for(e)
    plan = ExecutionPlan({"m": 2, "n": 2}, ({"k": 2}, {"k": 2}, {}))
    op = OpProgram("mm", e, plan, ("A", "B"), "C")
    prog = DeviceProgram("rc", HW16.to_dict(), (TensorDecl("A", (5, 6), "float32"),), ("C",), (op,),
                         constants={"B": encode_constant(b)})
    (out,) = SimulatedDevice().run(prog.to_json(), [a])
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


# -- regions of several ops, and runs -----------------------------------------------------------------
def _chain(exprs, hw):
    """r: C = A @ B (intermediate), D = C + b, E = sum_k C[i, k]; outputs D and E."""
    mm = exprs.matmul(6, 8, 10)
    ba = exprs.bias_add(6, 10)
    rs = exprs.row_sum(6, 10)
    ops = (
        OpProgram("mm", mm, ExecutionPlan({"m": 2, "n": 2}, ({"k": 2}, {"k": 2}, {})), ("A", "B"), "C"),
        OpProgram("add", ba, ExecutionPlan({"i": 3, "j": 2}, ({}, {"j": 3}, {})), ("C", "b"), "D"),
        OpProgram("sum", rs, ExecutionPlan({"i": 2, "k": 2}, ({}, {})), ("C",), "E"),
    )
    decls = (TensorDecl("A", (6, 8), "float32"), TensorDecl("B", (8, 10), "float32"),
             TensorDecl("b", (1, 10), "float32"))
    return ops, decls


def test_region_with_intermediates(exprs) -> None:
    ops, decls = _chain(exprs, HW16)
    prog = DeviceProgram("chain", HW16.to_dict(), decls, ("D", "E"), ops)
    a, b, bias = (RNG.standard_normal(d.shape).astype(np.float32) for d in decls)
    dev = SimulatedDevice()
    d, s = dev.run(prog, [a, b, bias])
    c = a.astype(np.float64) @ b
    np.testing.assert_allclose(d, c + bias, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s, c.sum(axis=1), rtol=1e-5, atol=1e-5)
    stats = dev.last_run_stats()
    region = stats["regions"][0]
    layouts = [OpLayout(op.expr, op.plan) for op in ops]
    # C is placed twice (add and sum): re-layout traffic of both, what the cores receive from
    # others (element by element, not what they already hold)
    assert stats["relayout_bytes"] == received_bytes(layouts[0], layouts[1], 0) + \
        received_bytes(layouts[0], layouts[2], 0) > 0
    # while 'add' runs, core 0 also holds its ring-0 partition of C (still needed by 'sum')
    c_on_core0 = layouts[0].partition_bytes(2)
    assert region["ops"][1]["sram_bytes_per_core"] == (
        layouts[1].memory_bytes_per_core() + c_on_core0 + HW16.shift_buffer_bytes)
    # while 'sum' runs, core 0 holds its partition of the region output D
    assert region["ops"][2]["sram_bytes_per_core"] == (
        layouts[2].memory_bytes_per_core() + layouts[1].partition_bytes(2) + HW16.shift_buffer_bytes)
    assert stats["steps"] == sum(lay.steps for lay in layouts)
    assert stats["shift_bytes"] == sum(lay.shift_bytes() + lay.reduction_bytes() for lay in layouts)
    assert (dev.sram_used_per_core() == HW16.shift_buffer_bytes).all()  # everything freed


def test_runs_group_regions(exprs) -> None:
    dev = get_device()
    dev.reset_stats()
    assert dev.last_run_stats()["regions_executed"] == 0
    e = exprs.matmul(4, 4, 4)
    plan = ExecutionPlan({"m": 2}, ({}, {}, {}))
    args = data_for(e)
    dev.run(program(e, plan, HW16, region="r0"), args)
    dev.run(program(e, plan, HW16, region="r1"), args)
    assert dev.last_run_stats()["regions_executed"] == 2
    dev.run(program(e, plan, HW16, region="r0"), args)  # the model is invoked again
    stats = dev.last_run_stats()
    assert stats["regions_executed"] == 1 and stats["regions"][0]["region"] == "r0"
    dev.reset_stats()
    assert dev.last_run_stats()["regions_executed"] == 0


def test_runs_follow_run_order_and_end_at_a_failed_call(exprs) -> None:
    """A region shared by three layers runs three times per run; a call that fails ends its
    run, so the next invocation is not counted as the failed run's continuation."""
    import dataclasses

    dev = get_device()
    dev.reset_stats()
    e = exprs.matmul(4, 4, 4)
    layer = dataclasses.replace(program(e, ExecutionPlan({"m": 2}, ({}, {}, {})), HW16, region="layer"),
                                module="m", run_order=("layer",) * 3)
    args = data_for(e)
    for calls in (1, 2, 3, 1):  # a fourth call is the next invocation
        dev.run(layer, args)
        assert dev.last_run_stats(timing=False)["regions_executed"] == calls
    with pytest.raises(DeviceProgramError):
        dev.run(layer, [args[0][:2], args[1]])  # the second layer's call fails
    assert dev.last_run_stats(timing=False)["regions_executed"] == 1  # the failed run, so far
    dev.run(layer, args)  # the next invocation starts afresh
    assert dev.last_run_stats(timing=False)["regions_executed"] == 1
    dev.reset_stats()


def test_full_ipu_chip_is_vectorized(exprs) -> None:
    """1,472 cores: steps are numpy calls over all cores, not Python loops per core."""
    hw = preset("ipu-mk2")
    e = exprs.matmul(64, 32, 92)
    plan = ExecutionPlan({"m": 32, "n": 46}, ({"k": 2}, {"k": 2}, {}))
    start = time.perf_counter()
    dev = run_single(e, plan, hw)
    assert time.perf_counter() - start < 10
    assert dev.last_run_stats()["cores_used"] == 1472


# -- wide reductions: core-local statistics split across cores ---------------------------------
def _norm_ref(kind: str, args: list[np.ndarray]) -> np.ndarray:
    a = [x.astype(np.float64) for x in args]
    x = a[0]
    if kind == "softmax":
        return softmax_ref(x)
    if kind == "rms_norm":
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5) * a[1]
    mean = x.mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5) * a[1] + a[2]


@settings(max_examples=40, deadline=None)
@given(data=st.data(), kind=st.sampled_from(["softmax", "layer_norm", "rms_norm"]),
       cores=st.sampled_from([4, 8, 16, 64]))
def test_split_row_reductions_match_numpy(exprs, data, kind, cores) -> None:
    """Random shapes and random valid plans that may split the normalized row across cores:
    partial statistics, a combine across the cores sharing a row, then the elementwise tail."""
    M = data.draw(st.integers(1, 6))
    N = data.draw(st.sampled_from([1, 4, 6, 12, 16, 30]))
    e = getattr(exprs, kind)(M, N)
    plan = exprs.random_plan(data.draw, e, cores)
    layout = OpLayout(e, plan)
    hw = small_chip(cores)
    dev = SimulatedDevice()
    args = data_for(e)
    (out,) = dev.run(program(e, plan, hw), args)
    np.testing.assert_allclose(out.astype(np.float64), _norm_ref(kind, args), rtol=1e-4, atol=1e-5)
    check_stats(dev, layout, hw)
    levels = {"softmax": 2, "layer_norm": 2, "rms_norm": 1}[kind]
    if layout.combine_size > 1:
        assert len(layout.combine_levels()) == levels
        assert layout.combine_bytes() > 0


def test_wide_row_uses_many_cores(exprs) -> None:
    """A 5,120-wide RMS norm row over 64 cores: each core holds 80 elements of it."""
    e = exprs.rms_norm(2, 5120)
    plan = ExecutionPlan({"i": 2, "j": 64}, ({}, {}, {}))
    dev = SimulatedDevice()
    args = data_for(e)
    (out,) = dev.run(program(e, plan, small_chip(128)), args)
    np.testing.assert_allclose(out, _norm_ref("rms_norm", args), rtol=1e-4, atol=1e-5)
    layout = OpLayout(e, plan)
    assert layout.num_cores == 128 and layout.partition_shape(0) == (1, 80)
    assert dev.last_run_stats()["reduction_bytes"] == 2 * 2 * 63 * 4


def test_split_row_must_divide(exprs) -> None:
    from runtime_sim.contract.errors import InvalidPlanError
    e = exprs.softmax(4, 10)
    with pytest.raises(InvalidPlanError, match="must divide"):
        OpLayout(e, ExecutionPlan({"j": 3}, ({}, {}))).validate()


# -- 16-bit formats: float32 arithmetic, results rounded to the storage dtype -----------------------
def _unit_roundoff(dtype: str) -> float:
    """Half a unit in the last place, relative: the error of rounding one value to ``dtype``."""
    import ml_dtypes  # pylint: disable=import-outside-toplevel

    return float(ml_dtypes.finfo(np.dtype(dtype)).eps) / 2


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_matmul_accumulates_in_float32(exprs, dtype) -> None:
    """A split reduction over 4 cores: the only error beyond float32's is the final rounding."""
    M, K, N = 8, 256, 8
    e = exprs.matmul(M, K, N, dtype=dtype)
    a, b = [RNG.standard_normal(t.shape).astype(dtype) for t in e.inputs]
    plan = ExecutionPlan({"m": 2, "n": 2, "k": 4}, ({}, {}, {}))
    (out,) = SimulatedDevice().run(program(e, plan, HW16), [a, b])
    assert out.dtype == np.dtype(dtype)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    bound = _unit_roundoff(dtype) * np.abs(ref) + K * np.finfo(np.float32).eps * scale
    assert np.all(np.abs(out.astype(np.float64) - ref) <= bound)
    # the bound is sharp: summing in the 16-bit format itself would break it
    acc = np.zeros((M, N), dtype)
    for k in range(K):
        acc = (acc + np.outer(a[:, k], b[k, :]).astype(dtype)).astype(dtype)
    assert np.any(np.abs(acc.astype(np.float64) - ref) > bound)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_layer_norm_against_float32_reference(exprs, dtype) -> None:
    M, N = 6, 96
    e = exprs.layer_norm(M, N, dtype=dtype)
    x = (RNG.standard_normal((M, N)) * 4 + 3).astype(dtype)
    gamma = (1 + 0.1 * RNG.standard_normal(N)).astype(dtype)
    beta = (0.1 * RNG.standard_normal(N)).astype(dtype)
    plan = ExecutionPlan({"i": 3, "j": 2}, ({}, {}, {}, {}))
    (out,) = SimulatedDevice().run(program(e, plan, HW16), [x, gamma, beta])
    assert out.dtype == np.dtype(dtype)
    x32 = x.astype(np.float32)
    mean = x32.mean(axis=1, keepdims=True)
    ref = (x32 - mean) / np.sqrt(((x32 - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    ref = ref * gamma.astype(np.float32) + beta.astype(np.float32)
    # rounding the result to the format, plus float32's error on O(1) normalized values
    tol = _unit_roundoff(dtype) * np.abs(ref) + 64 * np.finfo(np.float32).eps
    assert np.all(np.abs(out.astype(np.float32) - ref) <= tol)


# -- merged output dimensions (reshape [B, H, D] -> [B, H*D]) -------------------------------------
def _merge(out_index, epilogue=None):
    from runtime_sim.contract.expr import AffineIndex, make_load

    a = AffineIndex.of_axis
    x = TensorAccess("X", (2, 3, 4), "float32", (a("b"), a("h"), a("d")))
    y = TensorAccess("Y", (2, 12), "float32", (a("b"), out_index))
    axes = (Axis("b", 2), Axis("h", 3), Axis("d", 4))
    return TensorExpr("elementwise", axes, (x,), y, make_load(0, x.indices), epilogue=epilogue)


def test_merged_output_runs_and_is_validated() -> None:
    from runtime_sim.contract.expr import AffineIndex

    good = _merge(AffineIndex((("h", 4), ("d", 1))))
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    (y,) = SimulatedDevice(HW16).run(program(good, ExecutionPlan({"b": 2, "h": 3}, ({}, {})), HW16), [x])
    assert np.array_equal(y, x.reshape(2, 12))
    bad_strides = _merge(AffineIndex((("h", 3), ("d", 1))))  # would write positions twice
    with pytest.raises(DeviceProgramError, match="merged row-major"):
        validate_program(program(bad_strides, ExecutionPlan({}, ({}, {})), HW16))
    # an epilogue over a merged output (a grouped conv's bias + relu) writes the same positions
    with_epilogue = _merge(AffineIndex((("h", 4), ("d", 1))),
                           epilogue={"op": "max", "args": [{"op": "result"}, {"op": "const", "value": 0.0}]})
    (y,) = SimulatedDevice(HW16).run(
        program(with_epilogue, ExecutionPlan({"b": 2, "h": 3}, ({}, {})), HW16), [x])
    assert np.array_equal(y, np.maximum(x.reshape(2, 12), 0))
    with pytest.raises(InvalidPlanError, match="merged output dimension"):
        SimulatedDevice(HW16).run(program(good, ExecutionPlan({"d": 2}, ({}, {})), HW16), [x])
