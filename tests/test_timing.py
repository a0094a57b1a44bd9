"""The timing simulator end to end (runtime_sim.timing.simulate): steps, bytes and SRAM agree
with the functional device on hand-built and random programs; bad programs fail as on the device."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.contract.constants import encode_constant
from runtime_sim.contract.errors import SramOverflowError
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.functional.device import SimulatedDevice
from runtime_sim.timing import input_boxes, simulate_timing
from tvm_icca.testing.timing_programs import chain_program, one_op_program

LAT = 1e-7  # link latency used where the closed forms should show it
HW16 = small_chip(16, link_latency_s=LAT)


def device_stats(program: DeviceProgram, seed: int = 7) -> dict:
    """The functional device's run statistics of ``program`` on random inputs (its counts do
    not depend on the values)."""
    rng = np.random.default_rng(seed)
    dev = SimulatedDevice()
    args = [rng.standard_normal(d.shape).astype(d.dtype) for d in program.inputs]
    dev.run(program, args)
    return dev.last_run_stats()


MATMUL_PLANS = [
    ({}, ({}, {}, {}), ()),
    ({"m": 3, "n": 3}, ({"k": 3}, {"k": 3}, {}), ()),  # T10 Fig. 10: Cannon on 3x3 cores
    ({"m": 2, "n": 4, "k": 2}, ({"k": 4}, {"k": 2}, {}), ()),  # unequal f_t on k
    ({"m": 2, "n": 2, "k": 4}, ({}, {}, {}), ()),  # split reduction: replicas of C
    ({"m": 4, "n": 2, "k": 2}, ({"k": 2}, {"k": 4}, {}), ()),
    ({"m": 2, "k": 2}, ({}, {"n": 2}, {}), ()),  # B rotates on n
    ({"m": 2, "n": 4}, ({"k": 4}, {"k": 2, "n": 1}, {"n": 1}), ("k",)),
]


@pytest.mark.parametrize("F, temporal, order", MATMUL_PLANS)
def test_steps_bytes_and_sram_equal_the_device(exprs, F, temporal, order) -> None:
    e = exprs.matmul(12, 16, 20)
    prog = one_op_program(e, ExecutionPlan(F, temporal, order), HW16)
    stats = device_stats(prog)
    report = simulate_timing([prog])
    assert report.steps == stats["steps"]
    assert report.shift_bytes == stats["shift_bytes"]
    assert report.rotation_bytes == stats["rotation_bytes"]
    assert report.reduction_bytes == stats["reduction_bytes"]
    assert report.peak_sram_bytes_per_core == stats["peak_sram_bytes_per_core"]


def test_region_with_intermediates_matches_device() -> None:
    prog = chain_program(HW16)
    stats = device_stats(prog)
    report = simulate_timing([prog])
    assert report.num_ops == 3 and report.steps == stats["steps"]
    assert report.shift_bytes == stats["shift_bytes"]
    assert report.peak_sram_bytes_per_core == stats["peak_sram_bytes_per_core"]
    region = stats["regions"][0]
    for op, dev_op in zip(report.per_op, region["ops"]):
        assert op.sram_bytes_per_core == dev_op["sram_bytes_per_core"]
        assert op.shift_bytes == dev_op["shift_bytes"] and op.steps == dev_op["steps"]
    # C is re-laid out for 'add' and 'sum': exact box overlaps, the bytes the device counts
    assert 0 < report.relayout_bytes == stats["relayout_bytes"]
    assert report.per_op[0].relayout_bytes == 0  # A and B come from the host


@pytest.mark.parametrize("kind", ["matmul", "conv", "softmax", "bias_relu", "mean"])
def test_planned_programs_match_device(exprs, kind) -> None:
    from tvm_icca.plan_search import plan_operator

    hw = small_chip(32, 32 * 1024, link_latency_s=LAT)
    e = {"matmul": lambda: exprs.matmul(48, 64, 40),
         "conv": lambda: exprs.conv2d(2, 8, 10, 10, 12, 3, 3, stride=1, pad=1),
         "softmax": lambda: exprs.softmax(16, 24),
         "bias_relu": lambda: exprs.matmul_bias_relu(32, 48, 24),
         "mean": lambda: exprs.row_sum(24, 64, mean=True)}[kind]()
    planned = plan_operator(e, hw, budget_bytes=hw.usable_sram_bytes // 4)
    prog = one_op_program(e, planned.plan, hw)
    stats = device_stats(prog)
    report = simulate_timing([prog])
    assert (report.steps, report.shift_bytes, report.peak_sram_bytes_per_core) == (
        stats["steps"], stats["shift_bytes"], stats["peak_sram_bytes_per_core"])


def test_sram_overflow_raises_like_the_device(exprs) -> None:
    e = exprs.matmul(64, 64, 64)
    prog = one_op_program(e, ExecutionPlan({}, ({}, {}, {})), small_chip(4, 32 * 1024))
    with pytest.raises(SramOverflowError, match="op0"):
        simulate_timing([prog])


def test_constants_with_data_and_hw_override(exprs) -> None:
    e = exprs.matmul(16, 16, 16)
    plan = ExecutionPlan({"m": 2, "n": 2}, ({}, {}, {}))
    prog = one_op_program(e, plan, HW16, constants=("B",))
    data = DeviceProgram.from_dict({**prog.to_dict(), "constants": {
        "B": {**encode_constant(np.ones((16, 16), np.float32)), "source": "resident"}}})
    assert simulate_timing([data]).total_s == pytest.approx(simulate_timing([prog]).total_s)
    mesh = simulate_timing([prog], small_chip(16, topology="mesh"))
    assert mesh.topology == "mesh" and mesh.total_s > 0


def test_progress_callback_counts_every_operator() -> None:
    prog = chain_program(HW16)
    regions = [DeviceProgram.from_dict({**prog.to_dict(), "region": f"chain{i}"}) for i in range(3)]
    quiet = simulate_timing(regions)
    calls = []
    loud = simulate_timing(regions, on_op=lambda: calls.append(1))
    assert len(calls) == sum(len(p.ops) for p in regions) == 3 * len(prog.ops)
    assert loud.total_s == quiet.total_s and loud.num_regions == 3


def _add4(exprs, shape):
    """P = O + O over a 4-D tensor (both operands read the producer's output)."""
    from runtime_sim.contract.expr import Axis, TensorAccess, TensorExpr

    idx = tuple(exprs.ax(a) for a in "bcyx")
    o = TensorAccess("O", shape, "float32", idx)
    p = TensorAccess("P", shape, "float32", idx)
    return TensorExpr("elementwise", tuple(Axis(a, n) for a, n in zip("bcyx", shape)), (o, o), p,
                      exprs.op("add", exprs.load(0, idx), exprs.load(1, idx)))


@settings(max_examples=20, deadline=None)
@given(data=st.data(), pair=st.sampled_from(["add->matmul", "matmul->softmax", "conv->add"]),
       cores=st.sampled_from([4, 8, 16]))
def test_random_chains_match_device(exprs, data, pair, cores) -> None:
    i = lambda lo, hi: data.draw(st.integers(lo, hi))  # noqa: E731
    M, N, K = i(2, 9), i(2, 9), i(2, 9)
    if pair == "add->matmul":
        first, second = exprs.bias_add(M, N), exprs.matmul(M, N, K)
        reads = ("T", "w1")  # A is the intermediate, B a region input
    elif pair == "matmul->softmax":
        first, second = exprs.matmul(M, K, N), exprs.softmax(M, N)
        reads = ("T",)
    else:
        first = exprs.conv2d(1, 2, 5, 5, 3, 3, 3, pad=1)
        second = _add4(exprs, first.output.shape)
        reads = ("T", "T")
    hw = small_chip(cores, 256 * 1024)
    p1, p2 = (exprs.random_plan(data.draw, e, cores) for e in (first, second))
    ops = (OpProgram("first", first, p1, tuple(t.name for t in first.inputs), "T"),
           OpProgram("second", second, p2, reads, "U"))
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype) for t in first.inputs)
    decls += tuple(TensorDecl(n, t.shape, t.dtype) for n, t in zip(reads, second.inputs) if n != "T")
    prog = DeviceProgram("pair", hw.to_dict(), decls, ("U",), ops)
    stats = device_stats(prog)
    report = simulate_timing([prog])
    assert (report.steps, report.shift_bytes, report.peak_sram_bytes_per_core) == (
        stats["steps"], stats["shift_bytes"], stats["peak_sram_bytes_per_core"])
    # the re-layout sends what the consumer's boxes lack, as the device counts it
    layout = OpLayout(second, p2)
    needed = sum(float(input_boxes(layout, t).nbytes.sum()) for t, n in enumerate(reads) if n == "T")
    assert report.relayout_bytes == stats["relayout_bytes"] <= needed


def test_scalar_intermediate(exprs) -> None:
    from runtime_sim.contract.expr import Axis, TensorAccess, TensorExpr

    x = TensorAccess("X", (5, 7), "float32", (exprs.ax("i"), exprs.ax("k")))
    s = TensorAccess("S", (), "float32", ())
    total = TensorExpr("reduce", (Axis("i", 5, True), Axis("k", 7, True)), (x,), s,
                       exprs.load(0, x.indices))
    xi = TensorAccess("X", (5, 7), "float32", (exprs.ax("i"), exprs.ax("j")))
    y = TensorAccess("Y", (5, 7), "float32", (exprs.ax("i"), exprs.ax("j")))
    scale = TensorExpr("elementwise", (Axis("i", 5), Axis("j", 7)), (xi, s), y,
                       exprs.op("mul", exprs.load(0, xi.indices), exprs.load(1, ())))
    ops = (OpProgram("sum", total, ExecutionPlan({"i": 2, "k": 3}, ({}, {})), ("X",), "S"),
           OpProgram("scale", scale, ExecutionPlan({"i": 5, "j": 2}, ({}, {}, {})), ("X", "S"), "Y"))
    prog = DeviceProgram("sc", HW16.to_dict(), (TensorDecl("X", (5, 7), "float32"),), ("Y",), ops)
    stats = device_stats(prog)
    report = simulate_timing([prog])
    assert (report.steps, report.shift_bytes, report.peak_sram_bytes_per_core) == (
        stats["steps"], stats["shift_bytes"], stats["peak_sram_bytes_per_core"])
    # the scalar's owner keeps its copy; the 9 other consumer cores receive 4 bytes each
    assert report.per_op[1].relayout_bytes == 9 * 4
