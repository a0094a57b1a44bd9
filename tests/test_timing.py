"""Timing simulator (runtime_sim.timing): closed forms, agreement with the functional device."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.contract.constants import encode_constant
from runtime_sim.contract.errors import SramOverflowError
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.contract.validation import validate_program
from runtime_sim.functional.device import SimulatedDevice
from runtime_sim.machine.topology import make_topology
from runtime_sim.timing import (
    canonical_grid,
    input_boxes,
    op_cost,
    producer_grid,
    relayout,
    relayout_flows,
    shift_schedule,
    simulate_timing,
)
from schedules import template_for

LAT = 1e-7  # link latency used where the closed forms should show it
RNG = np.random.default_rng(7)


# -- helpers ----------------------------------------------------------------------------------
def single(expr, plan, hw, sources=None, constants=(), name="op0", region="r0") -> DeviceProgram:
    """One-op program; inputs from ``sources`` (name -> source) or constants (shape only).

    Constants are model state kept on chip (``"resident"``) on a chip without HBM, and read
    from HBM on a chip with it (the source a constant without one gets there)."""
    sources = sources or {}
    state = {} if hw.hbm_bandwidth > 0 else {"source": "resident"}
    consts = {t.name: {"dtype": t.dtype, "shape": list(t.shape), **state}
              for t in expr.inputs if t.name in constants}
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype, sources.get(t.name, "host"))
                  for t in expr.inputs if t.name not in constants)
    op = OpProgram(name, expr, plan, tuple(t.name for t in expr.inputs), expr.output.name)
    return DeviceProgram(region, hw.to_dict(), decls, (expr.output.name,), (op,), constants=consts)


def device_stats(program: DeviceProgram) -> dict:
    dev = SimulatedDevice()
    args = [RNG.standard_normal(d.shape).astype(d.dtype) for d in program.inputs]
    dev.run(program, args)
    return dev.last_run_stats()


def brute_force_shifts(layout: OpLayout, topo) -> tuple[float, float, int, int]:
    """Walk every step with counters()/shifts_after(): (time, uncontended, bytes, phases)."""
    t = u = 0.0
    nbytes = phases = 0
    for counters, advancing in layout.counters():
        src, dst, b = [], [], []
        for ev in layout.shifts_after(counters, advancing):
            moving = np.flatnonzero(ev.moving)
            src.append(ev.source[moving])
            dst.append(moving)
            b.append(np.full(moving.size, float(layout.partition_bytes(ev.tensor))))
        if src:
            cost = topo.phase(np.concatenate(src), np.concatenate(dst), np.concatenate(b))
            t += cost.time_s
            u += cost.uncontended_s
            nbytes += int(np.concatenate(b).sum())
            phases += 1
    return t, u, nbytes, phases


HW16 = small_chip(16, link_latency_s=LAT)

MATMUL_PLANS = [
    ({}, ({}, {}, {}), ()),
    ({"m": 3, "n": 3}, ({"k": 3}, {"k": 3}, {}), ()),  # T10 Fig. 10: Cannon on 3x3 cores
    ({"m": 2, "n": 4, "k": 2}, ({"k": 4}, {"k": 2}, {}), ()),  # unequal f_t on k
    ({"m": 2, "n": 2, "k": 4}, ({}, {}, {}), ()),  # split reduction: replicas of C
    ({"m": 4, "n": 2, "k": 2}, ({"k": 2}, {"k": 4}, {}), ()),
    ({"m": 2, "k": 2}, ({}, {"n": 2}, {}), ()),  # B rotates on n
    ({"m": 2, "n": 4}, ({"k": 4}, {"k": 2, "n": 1}, {"n": 1}), ("k",)),
]


# -- the closed-form shift schedule -------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(data=st.data(), kind=st.sampled_from(["matmul", "bmm", "conv"]),
       cores=st.sampled_from([8, 16, 32, 64]),
       net=st.sampled_from(["all-to-all", "mesh", "2 chips", "2 chips mesh"]))
def test_shift_schedule_equals_walking_every_step(exprs, data, kind, cores, net) -> None:
    if kind == "matmul":
        e = exprs.matmul(24, 40, 36)
    elif kind == "bmm":
        e = exprs.matmul(6, 16, 12, batch=3)
    else:
        e = exprs.conv2d(2, 6, 7, 7, 8, 3, 3, stride=1, pad=1)
    plan = exprs.random_plan(data.draw, e, cores)
    over = dict(link_latency_s=LAT, topology="mesh" if "mesh" in net else "all-to-all")
    if "chips" in net:
        over.update(num_chips=2, inter_chip_bandwidth=20e9)  # a cap the links can exceed
    hw = small_chip(cores, **over)
    topo = make_topology(hw)
    layout = OpLayout(e, plan)
    cost = op_cost(layout, hw, topo)
    t, u, nbytes, phases = brute_force_shifts(layout, topo)
    assert not cost.shift_sampled
    assert cost.rotation_bytes == nbytes == layout.shift_bytes()
    assert cost.shift_phases == phases
    assert sum(p.count for p in shift_schedule(layout)) == phases <= layout.steps
    assert cost.shift.time_s == pytest.approx(t, rel=1e-9, abs=1e-15)
    assert cost.shift.uncontended_s == pytest.approx(u, rel=1e-9, abs=1e-15)


def test_long_schedules_are_closed_form_not_walked(exprs) -> None:
    """Thousands of steps on a 4-chip system cost a few distinct phases, in milliseconds."""
    hw = preset("ipu-pod4-hbm")
    e = exprs.matmul(4096, 8192, 11776, dtype="float16")
    plan = ExecutionPlan({"m": 46, "n": 128}, ({"k": 128}, {"k": 2, "n": 23}, {}), ("n", "k"))
    layout = OpLayout(e, plan)
    start = time.perf_counter()
    cost = op_cost(layout, hw, make_topology(hw))
    elapsed = time.perf_counter() - start
    assert layout.steps == 2944 and cost.distinct_shift_phases < 100
    assert cost.rotation_bytes == layout.shift_bytes()
    assert elapsed < 2.0  # walking 2,944 steps over 5,888 cores would take far longer


# -- agreement with the functional device -------------------------------------------------------
@pytest.mark.parametrize("F, temporal, order", MATMUL_PLANS)
def test_steps_bytes_and_sram_equal_the_device(exprs, F, temporal, order) -> None:
    e = exprs.matmul(12, 16, 20)
    prog = single(e, ExecutionPlan(F, temporal, order), HW16)
    stats = device_stats(prog)
    report = simulate_timing([prog])
    assert report.steps == stats["steps"]
    assert report.shift_bytes == stats["shift_bytes"]
    assert report.rotation_bytes == stats["rotation_bytes"]
    assert report.reduction_bytes == stats["reduction_bytes"]
    assert report.peak_sram_bytes_per_core == stats["peak_sram_bytes_per_core"]


def _chain(exprs, hw):
    mm = exprs.matmul(6, 8, 10)
    ba = exprs.bias_add(6, 10)
    rs = exprs.row_sum(6, 10)
    ops = (
        OpProgram("mm", mm, ExecutionPlan({"m": 2, "n": 2, "k": 2}, ({"k": 2}, {}, {})), ("A", "B"), "C"),
        OpProgram("add", ba, ExecutionPlan({"i": 3, "j": 2}, ({}, {"j": 3}, {})), ("C", "b"), "D"),
        OpProgram("sum", rs, ExecutionPlan({"i": 2, "k": 2}, ({}, {})), ("C",), "E"),
    )
    decls = (TensorDecl("A", (6, 8), "float32"), TensorDecl("B", (8, 10), "float32"),
             TensorDecl("b", (1, 10), "float32"))
    return DeviceProgram("chain", hw.to_dict(), decls, ("D", "E"), ops)


def test_region_with_intermediates_matches_device(exprs) -> None:
    prog = _chain(exprs, HW16)
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
    from tvm_icca.plans import plan_operator

    hw = small_chip(32, 32 * 1024, link_latency_s=LAT)
    e = {"matmul": lambda: exprs.matmul(48, 64, 40),
         "conv": lambda: exprs.conv2d(2, 8, 10, 10, 12, 3, 3, stride=1, pad=1),
         "softmax": lambda: exprs.softmax(16, 24),
         "bias_relu": lambda: exprs.matmul_bias_relu(32, 48, 24),
         "mean": lambda: exprs.row_sum(24, 64, mean=True)}[kind]()
    planned = plan_operator(e, hw, budget_bytes=hw.usable_sram_bytes // 4)
    prog = single(e, planned.plan, hw)
    stats = device_stats(prog)
    report = simulate_timing([prog])
    assert (report.steps, report.shift_bytes, report.peak_sram_bytes_per_core) == (
        stats["steps"], stats["shift_bytes"], stats["peak_sram_bytes_per_core"])


# -- closed forms -------------------------------------------------------------------------------
def test_compute_bound_matmul_runs_at_peak(exprs) -> None:
    hw = small_chip(16, 1024 * 1024, sync_cycles=0)
    e = exprs.matmul(256, 256, 256, dtype="float16")
    prog = single(e, ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {})), hw, constants=("A", "B"))
    report = simulate_timing([prog])  # no HBM: constants stay on chip in place (T10 §4.3.2)
    peak = 2 * 256 ** 3 / (hw.num_cores * hw.matrix_flops_per_cycle * hw.clock_hz)
    assert report.total_s == pytest.approx(peak, rel=0.01)
    assert report.compute_s == pytest.approx(peak, rel=0.01) and report.transfer_s == 0
    assert report.flops_utilization == pytest.approx(1.0, rel=0.01)
    assert report.flops == 2 * 256 ** 3


def test_cannon_steps_and_shifts_closed_form(exprs) -> None:
    """T10 Fig. 10 on 3x3 cores: 3 steps, after each A and B arrive over each core's port."""
    e = exprs.matmul(48, 96, 48)
    plan = ExecutionPlan({"m": 3, "n": 3}, ({"k": 3}, {"k": 3}, {}))
    prog = single(e, plan, HW16, constants=("A", "B"))
    report = simulate_timing([prog])
    layout = OpLayout(e, plan)
    pa, pb = layout.partition_bytes(0), layout.partition_bytes(1)
    buf = HW16.shift_buffer_bytes
    shift = (pa + pb) / HW16.link_bandwidth + max(math.ceil(pa / buf), math.ceil(pb / buf)) * LAT
    cycles = template_for("matmul").subtask_cycles(e, layout.rp, HW16) + HW16.sync_cycles
    op = report.per_op[0]
    assert op.shift_s == pytest.approx(3 * shift, rel=1e-9)
    assert op.compute_s == pytest.approx(3 * cycles / HW16.clock_hz, rel=1e-9)
    assert report.total_s == pytest.approx(3 * shift + 3 * cycles / HW16.clock_hz, rel=1e-9)
    # a core receives A and B in the same phase: contention on its port, B alone would not wait
    assert op.stall_s == pytest.approx(3 * (shift - pb / HW16.link_bandwidth
                                            - math.ceil(pb / buf) * LAT), rel=1e-6)


def test_split_reduction_is_a_binomial_tree(exprs) -> None:
    e = exprs.matmul(16, 64, 16)
    plan = ExecutionPlan({"k": 8}, ({}, {}, {}))
    prog = single(e, plan, HW16, constants=("A", "B"))
    report = simulate_timing([prog])
    layout = OpLayout(e, plan)
    pc = layout.partition_bytes(2)  # 1 KiB: one chunk
    assert report.reduction_bytes == layout.reduction_bytes() == 7 * pc
    rounds = 3  # log2(8)
    transfer = rounds * (pc / HW16.link_bandwidth + LAT)
    assert report.transfer_s == pytest.approx(transfer, rel=1e-9)
    adds = rounds * (16 * 16 / HW16.vector_flops_per_cycle + HW16.sync_cycles) / HW16.clock_hz
    assert report.per_op[0].reduction_s == pytest.approx(transfer + adds, rel=1e-9)


def test_hbm_load_is_limited_by_controller_bandwidth(exprs) -> None:
    hbm_bw = 20e9  # slower than the 16 core links together (88 GB/s)
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=hbm_bw, hbm_controllers=4, sync_cycles=0)
    e = exprs.bias_add(256, 256)  # X is split into 16 distinct blocks, b is tiny
    plan = ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {}))
    prog = single(e, plan, hw, sources={"X": "hbm", "b": "hbm"})
    report = simulate_timing([prog])
    nbytes = 256 * 256 * 4 + 256 * 4  # b: 4 distinct column blocks, read once each
    op = report.per_op[0]
    assert report.hbm_bytes == pytest.approx(nbytes)
    assert op.hbm_s == pytest.approx(nbytes / hbm_bw, rel=0.01)
    assert report.total_s == pytest.approx(op.hbm_s + op.compute_s, rel=1e-9)
    assert report.hbm_utilization == pytest.approx(op.hbm_s / report.total_s * 1.0, rel=0.01)
    assert report.idle_s == pytest.approx(op.hbm_s) and report.overlap_s == 0


def test_report_names_the_cut_that_bounds_the_loads(exprs) -> None:
    """A mesh whose 4 controllers are NoC nodes in grid columns 0 and 5 (4 x 6 grid): with
    slow HBM the controllers' read bandwidth bounds the load; with fast HBM and a 100 MB/s
    injection cap, each controller's injection of its quarter of the bytes does."""
    e = exprs.bias_add(256, 256)
    plan = ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {}))
    nbytes = 256 * 256 * 4 + 256 * 4  # X: 16 distinct blocks; b: 4 column blocks, multicast
    chip = dict(topology="mesh", hbm_controllers=4, hbm_placement="columns:0,5", sync_cycles=0)
    slow = small_chip(16, 256 * 1024, hbm_bandwidth=1e9, **chip)
    report = simulate_timing([single(e, plan, slow, sources={"X": "hbm", "b": "hbm"})])
    assert report.load_bound_by == "hbm" and report.per_op[0].load_bound_by == "hbm"
    assert report.per_op[0].hbm_s == pytest.approx(nbytes / 1e9, rel=0.01)
    capped = small_chip(16, 256 * 1024, hbm_bandwidth=1e15, hbm_injection_bandwidth=1e8, **chip)
    report = simulate_timing([single(e, plan, capped, sources={"X": "hbm", "b": "hbm"})])
    assert report.load_bound_by == "injection" and list(report.load_bound_s) == ["injection"]
    assert report.per_op[0].hbm_s == pytest.approx(nbytes / 4 / 1e8, rel=0.01)
    assert "loads     bound by injection" in report.table()
    assert json.loads(report.to_json())["load_bound_by"] == "injection"


def test_replicated_hbm_data_is_read_once_per_chip(exprs) -> None:
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=1e12, hbm_controllers=4)
    e = exprs.matmul(64, 64, 64)
    plan = ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {}))  # A and B replicated 4x each
    report = simulate_timing([single(e, plan, hw, sources={"A": "hbm", "B": "hbm"})])
    assert report.hbm_bytes == pytest.approx(2 * 64 * 64 * 4)


def test_core_order_keeps_weight_replicas_on_one_chip(exprs) -> None:
    """A batch-split matmul on 2 chips with HBM: in the default numbering the batch axis is
    outermost, each chip holds a copy of every weight block and reads it from its own HBM;
    with the batch axis innermost the two replicas of a block are neighbours on one chip,
    which reads the block once (delivered to both cores on chip): each byte is read once."""
    bw = 1e10  # slow enough that the controllers, not the core links, set the load time
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=bw, hbm_controllers=2, num_chips=2,
                    inter_chip_bandwidth=50e9)
    e = exprs.matmul(8, 64, 64)  # axes m, n, k; the weights B[k, n] lack m
    F = {"m": 2, "n": 4, "k": 2}
    temporal = ({}, {}, {})
    nbytes = 64 * 64 * 4
    reports = {}
    for order in ((), ("n", "k", "m")):
        prog = single(e, ExecutionPlan(F, temporal, (), order), hw, sources={"A": "host", "B": "hbm"})
        report = reports[order] = simulate_timing([prog])
        assert report.total_s == pytest.approx(simulate_timing([prog]).total_s)
    default, mapped = reports[()], reports[("n", "k", "m")]
    delivered = lambda r: getattr(r, "hbm_delivered_bytes", r.hbm_bytes)  # noqa: E731 (copies)
    assert delivered(default) == pytest.approx(2 * nbytes)  # each chip reads all of B
    assert delivered(mapped) == pytest.approx(nbytes)  # each chip reads its half
    per_chip_bw = bw / 2  # one controller per chip
    assert default.per_op[0].hbm_s == pytest.approx(nbytes / per_chip_bw, rel=0.01)
    assert mapped.per_op[0].hbm_s == pytest.approx(nbytes / 2 / per_chip_bw, rel=0.01)
    # the functional device agrees on the answer whatever the numbering
    from tests.test_device import run_single
    run_single(e, ExecutionPlan(F, temporal, (), ("n", "k", "m")), hw)


def test_host_inputs_use_the_host_link(exprs) -> None:
    hw = small_chip(16, 256 * 1024)
    e = exprs.bias_add(256, 256)
    plan = ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {}))
    report = simulate_timing([single(e, plan, hw, constants=("b",))])
    assert hw.host_bandwidth == 8e9  # T10 Table 3
    assert report.host_in_bytes == 256 * 256 * 4
    assert report.host_s == pytest.approx(256 * 256 * 4 / 8e9, rel=0.01)


def _two_chip_ring(exprs, cap: float, **latencies):
    """A ring that spans two chips (F_op m=16: B is shared by all 16 cores and rotates on k in
    one ring of 16): the report, the hardware, its shifts crossing chips and B's partition."""
    hw = small_chip(16, num_chips=2, inter_chip_bandwidth=cap, **latencies)
    e = exprs.matmul(16, 256, 16)
    plan = ExecutionPlan({"m": 16}, ({}, {"k": 16}, {}))
    layout = OpLayout(e, plan)
    report = simulate_timing([single(e, plan, hw, constants=("A", "B"))])
    src = layout.shifts_after({"k": 0}, ("k",))[0].source
    chip = np.arange(16) // 8
    return report, hw, int((chip[src] != chip).sum()), layout.partition_bytes(1)


def test_multi_chip_rotation_is_capped_by_inter_chip_link(exprs) -> None:
    """A ring that spans two chips: its crossing shifts share the inter-chip cap."""
    cap = 2e9
    report, hw, crossing, pb = _two_chip_ring(exprs, cap, link_latency_s=0.0)
    assert crossing >= 2
    per_shift = max(pb / hw.link_bandwidth, crossing * pb / cap)
    assert report.per_op[0].shift_s == pytest.approx(16 * per_shift, rel=1e-9)
    assert report.inter_chip_bytes == pytest.approx(16 * crossing * pb)


# -- re-layout between operators -----------------------------------------------------------------
def _transpose_chain(exprs, hw, consumer_F):
    x = exprs.bias_add(8, 8)
    ops = (
        OpProgram("rows", x, ExecutionPlan({"i": 4}, ({}, {}, {})), ("X", "b"), "Y"),
        OpProgram("cols", x, ExecutionPlan(consumer_F, ({}, {}, {})), ("Y", "b"), "Z"),
    )
    decls = (TensorDecl("X", (8, 8), "float32"), TensorDecl("b", (1, 8), "float32"))
    return DeviceProgram("t", hw.to_dict(), decls, ("Z",), ops)


def test_relayout_moves_only_what_a_core_lacks(exprs) -> None:
    same = simulate_timing([_transpose_chain(exprs, HW16, {"i": 4})])
    assert same.per_op[1].relayout_bytes == 0 and same.per_op[1].relayout_s == 0
    cross = simulate_timing([_transpose_chain(exprs, HW16, {"j": 4})])
    # core c needs columns 2c..2c+1 of all 8 rows (16 floats) and holds a 2x2 block itself
    per_core = (16 - 4) * 4
    op = cross.per_op[1]
    assert op.relayout_bytes == 4 * per_core
    # from 3 owners, 16 bytes each, one after another on its receive port
    assert op.relayout_s == pytest.approx(per_core / HW16.link_bandwidth + LAT, rel=1e-9)


def test_relayout_broadcast_to_replicas(exprs) -> None:
    """Producer rows -> consumer that replicates the whole tensor on every core."""
    hw = HW16
    x = exprs.bias_add(8, 8)
    mm = exprs.matmul(8, 8, 16)  # A = Y is replicated over n
    ops = (
        OpProgram("rows", x, ExecutionPlan({"i": 4}, ({}, {}, {})), ("X", "b"), "Y"),
        OpProgram("mm", mm, ExecutionPlan({"n": 16}, ({}, {}, {})), ("Y", "B"), "C"),
    )
    decls = (TensorDecl("X", (8, 8), "float32"), TensorDecl("b", (1, 8), "float32"),
             TensorDecl("B", (8, 16), "float32"))
    report = simulate_timing([DeviceProgram("bc", hw.to_dict(), decls, ("C",), ops)])
    layout = OpLayout(mm, ops[1].plan)
    boxes = input_boxes(layout, 0)
    grid = producer_grid(OpLayout(x, ops[0].plan))
    topo = make_topology(hw)
    rl = relayout(grid, boxes, topo.node_chip, 1)
    flows = rl.flows()
    # each of 16 cores needs all 256 bytes; cores 0-3 own 64 of them
    assert rl.moved_bytes == 16 * 256 - 4 * 64
    explicit = topo.phase(flows.src, flows.dst, flows.nbytes, multicast=flows.multicast)
    assert report.per_op[1].relayout_s == pytest.approx(explicit.time_s, rel=1e-12)
    # a receiver takes 192-256 bytes; an owner sends its 64 bytes once (broadcast)
    assert explicit.time_s == pytest.approx(256 / hw.link_bandwidth + LAT, rel=1e-9)
    unicast = topo.phase(flows.src, flows.dst, flows.nbytes)
    assert unicast.time_s > explicit.time_s  # 15 copies of 64 bytes from each owner
    # the explicit flows carry exactly the moved bytes
    assert flows.nbytes.sum() == rl.moved_bytes
    assert relayout_flows(grid, boxes).nbytes.sum() == rl.moved_bytes


def test_chip_inputs_come_from_a_canonical_layout(exprs) -> None:
    g = canonical_grid((5888, 5888), 2, 5888)
    assert g.counts == (92, 64) or g.counts == (64, 92)
    assert int(np.prod(g.counts)) <= 5888 and g.owner.max() < 5888
    e = exprs.bias_add(64, 64)
    blocks = ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {}))  # the canonical 4x4 blocks: in place
    in_place = simulate_timing([single(e, blocks, HW16, sources={"X": "chip"}, constants=("b",))])
    assert in_place.relayout_bytes == 0 and in_place.host_in_bytes == 0
    cols = ExecutionPlan({"j": 16}, ({}, {}, {}))  # each core needs a column strip of 4 blocks
    on_chip = simulate_timing([single(e, cols, HW16, sources={"X": "chip"}, constants=("b",))])
    # core c needs columns 4c..4c+3 of all rows; it holds block (c // 4, c % 4) of the 4x4
    # canonical grid, which meets its strip only when c // 4 == c % 4 (16 rows x 4 columns)
    assert on_chip.relayout_bytes == 4 * (16 * 64 * 4 - 4 * 16 * 4)
    from_host = simulate_timing([single(e, cols, HW16, sources={"X": "host"}, constants=("b",))])
    assert on_chip.host_in_bytes == 0 and from_host.host_in_bytes == 64 * 64 * 4
    assert on_chip.total_s < from_host.total_s


# -- HBM prefetch policy -----------------------------------------------------------------------------
def _two_weights(exprs, hw):
    e = exprs.matmul(64, 64, 64)
    plan = ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {}))
    ops = (OpProgram("mm0", e, plan, ("X", "W0"), "H"), OpProgram("mm1", e, plan, ("H", "W1"), "Y"))
    decls = (TensorDecl("X", (64, 64), "float32", "chip"),)
    consts = {w: {"dtype": "float32", "shape": [64, 64]} for w in ("W0", "W1")}  # no data: timing only
    return DeviceProgram("mlp", hw.to_dict(), decls, ("Y",), ops, constants=consts), OpLayout(e, plan)


def test_prefetch_overlaps_loads_with_compute_when_sram_allows(exprs) -> None:
    base = dict(hbm_bandwidth=2e9, hbm_controllers=2)  # slow HBM: loads matter
    roomy = small_chip(16, 256 * 1024, **base)
    prog, layout = _two_weights(exprs, roomy)
    r = simulate_timing([prog])
    op0, op1 = r.per_op
    assert op1.prefetched and op1.load_start_s == pytest.approx(op0.start_s)
    assert r.overlap_s == pytest.approx(min(op1.hbm_s, op0.duration_s), rel=1e-6)
    assert r.total_s == pytest.approx(op0.hbm_s + max(op0.duration_s, op1.hbm_s) + op1.duration_s, rel=1e-6)
    # op 1's W1 partition fits beside op 0 only with room to spare: shrink SRAM until it does not
    footprint = layout.memory_bytes_per_core()
    tight_sram = footprint + roomy.shift_buffer_bytes + layout.partition_bytes(1) - 1
    tight = small_chip(16, tight_sram, **base)
    prog_t, _ = _two_weights(exprs, tight)
    t = simulate_timing([prog_t])
    t0, t1 = t.per_op
    assert not t1.prefetched and t1.load_start_s == pytest.approx(t0.end_s)
    assert t.overlap_s == 0
    assert t.total_s == pytest.approx(t0.hbm_s + t0.duration_s + t1.hbm_s + t1.duration_s, rel=1e-9)
    assert t.total_s > r.total_s
    assert r.peak_sram_with_prefetch_bytes_per_core > r.peak_sram_bytes_per_core
    assert t.peak_sram_with_prefetch_bytes_per_core == t.peak_sram_bytes_per_core


def test_shared_links_slow_an_overlapping_load(exprs) -> None:
    """A load that overlaps an operator busy shifting gets only the link time it leaves."""
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=1e12, hbm_controllers=4)
    e = exprs.matmul(64, 256, 64)
    rot = ExecutionPlan({"m": 4, "n": 4}, ({"k": 4}, {"k": 4}, {}))  # shifts every step
    ops = (OpProgram("mm0", e, rot, ("A", "B0"), "C0"), OpProgram("mm1", e, rot, ("A", "B1"), "C1"))
    consts = {n: {"dtype": "float32", "shape": list(s)} for n, s in
              (("A", (64, 256)), ("B0", (256, 64)), ("B1", (256, 64)))}
    consts["A"]["source"] = "resident"
    r = simulate_timing([DeviceProgram("p", hw.to_dict(), (), ("C0", "C1"), ops, constants=consts)])
    op0, op1 = r.per_op
    assert op1.prefetched
    alone = op0.hbm_s  # the same load with nothing running
    assert op1.hbm_s > alone  # delayed by op 0's shifts on the same ports


# -- report, trace, errors ---------------------------------------------------------------------------
def test_report_totals_dict_and_table(exprs) -> None:
    prog = _chain(exprs, HW16)
    r = simulate_timing([prog, _chain(exprs, HW16).__class__.from_dict(
        {**prog.to_dict(), "region": "chain2"})])
    assert r.num_ops == 6 and r.num_regions == 2
    assert r.total_s == pytest.approx(r.compute_s + r.transfer_s + r.idle_s, rel=1e-9)
    starts = [o.start_s for o in r.per_op]
    assert starts == sorted(starts)
    for a, b in zip(r.per_op, r.per_op[1:]):
        assert b.start_s >= a.end_s - 1e-15  # operators never overlap on the compute array
    d = json.loads(json.dumps(r.to_dict()))
    for key in ("total_s", "compute_s", "transfer_s", "hbm_s", "overlap_s", "stall_s", "num_ops",
                "hbm_bytes", "shift_bytes", "steps", "peak_sram_bytes_per_core", "flops",
                "flops_utilization", "hbm_utilization", "interconnect_utilization",
                "link_bandwidth_utilization", "per_op"):
        assert key in d
    assert "utilization" not in d  # one name per metric: no second, nested spelling
    assert set(d["per_op"][0]) >= {"name", "start_s", "end_s", "compute_s", "transfer_s", "hbm_s",
                                   "stall_s", "cores"}
    text = r.table()
    # operators are shown by label (kind and output shape), not by their generated names
    assert "matmul [" in text and "total" in text and "utilization" in text


def test_trace_opens_as_chrome_trace(exprs, tmp_path) -> None:
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=2e9, hbm_controllers=2, num_chips=2,
                    inter_chip_bandwidth=50e9)
    prog, _ = _two_weights(exprs, hw)
    r = simulate_timing([prog], trace=True)
    assert r.trace_events
    path = tmp_path / "t.json"
    r.write_trace(str(path))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"chip 0 (cores 0-7)", "chip 1 (cores 8-15)", "interconnect", "HBM", "host"} <= names
    threads = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"controller 0 (chip 0)", "controller 1 (chip 1)", "inter-chip links"} <= threads
    complete = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and "pid" in e and "tid" in e for e in complete)
    assert {"mm0", "mm1"} <= {e.get("args", {}).get("op") for e in complete}
    assert all(e["name"].startswith("matmul [") for e in complete if e["cat"] == "op")
    # complete events on one track nest or follow each other (what Perfetto needs)
    by_track: dict = {}
    for e in complete:
        by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list = []
        for s, t in spans:
            while stack and stack[-1] <= s + 1e-9:
                stack.pop()
            assert not stack or t <= stack[-1] + 1e-9
            stack.append(t)
    # without trace=True the events are built on demand
    r2 = simulate_timing([prog])
    assert not r2.trace_events
    r2.write_trace(str(tmp_path / "t2.json"))
    assert json.loads((tmp_path / "t2.json").read_text())["traceEvents"]


def test_sram_overflow_raises_like_the_device(exprs) -> None:
    e = exprs.matmul(64, 64, 64)
    prog = single(e, ExecutionPlan({}, ({}, {}, {})), small_chip(4, 32 * 1024))
    with pytest.raises(SramOverflowError, match="op0"):
        simulate_timing([prog])


def test_hbm_input_without_hbm_is_an_error(exprs) -> None:
    from runtime_sim.contract.errors import DeviceProgramError

    e = exprs.matmul(16, 16, 16)
    prog = single(e, ExecutionPlan({"m": 2}, ({}, {}, {})), HW16, sources={"A": "hbm"})
    with pytest.raises(DeviceProgramError, match="no HBM"):
        simulate_timing([prog])
    host = single(e, ExecutionPlan({"m": 2}, ({}, {}, {})), HW16)
    bad = DeviceProgram.from_dict({**host.to_dict(), "ops": [
        {**host.ops[0].to_dict(), "input_names": ["A", "nope"]}]})
    with pytest.raises(DeviceProgramError, match="unknown tensor 'nope'"):
        simulate_timing([bad])


def test_constants_with_data_and_hw_override(exprs) -> None:
    e = exprs.matmul(16, 16, 16)
    plan = ExecutionPlan({"m": 2, "n": 2}, ({}, {}, {}))
    prog = single(e, plan, HW16, constants=("B",))
    data = DeviceProgram.from_dict({**prog.to_dict(), "constants": {
        "B": {**encode_constant(np.ones((16, 16), np.float32)), "source": "resident"}}})
    assert simulate_timing([data]).total_s == pytest.approx(simulate_timing([prog]).total_s)
    mesh = simulate_timing([prog], small_chip(16, topology="mesh"))
    assert mesh.topology == "mesh" and mesh.total_s > 0


def test_progress_callback_counts_every_operator(exprs) -> None:
    prog = _chain(exprs, HW16)
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


# -- model state kept on chip (T10 §4.3.2): idle placements and setup re-layouts --------------
def _resident_program(e, plan, idle_plan, hw):
    """matmul with A from the host and B resident on chip (idling in ``idle_plan``)."""
    decls = (TensorDecl("A", tuple(e.inputs[0].shape), e.inputs[0].dtype, "host"),
             TensorDecl("B", tuple(e.inputs[1].shape), e.inputs[1].dtype, "resident"))
    op = OpProgram("op0", e, plan, ("A", "B"), e.output.name, idle_plan=idle_plan)
    return DeviceProgram("r0", hw.to_dict(), decls, (e.output.name,), (op,))


def test_resident_input_idling_in_its_active_plan_moves_nothing(exprs) -> None:
    e = exprs.matmul(16, 64, 16)
    plan = ExecutionPlan({"n": 16}, ({}, {}, {}))
    report = simulate_timing([_resident_program(e, plan, None, HW16)])
    assert report.relayout_bytes == 0 and report.per_op[0].relayout_s == 0.0
    # B's partition is held once (idle state), not again on top while the operator runs
    layout = OpLayout(e, plan)
    assert report.peak_sram_bytes_per_core == layout.memory_bytes_per_core() + HW16.shift_buffer_bytes


def test_resident_input_setup_moves_exactly_the_missing_bytes(exprs) -> None:
    e = exprs.matmul(16, 64, 16)
    plan = ExecutionPlan({"n": 16}, ({}, {}, {}))  # core j needs column j of B: 64 elements
    idle = ExecutionPlan({"k": 16}, ({}, {}, {}))  # core i holds rows 4i..4i+3 of B
    report = simulate_timing([_resident_program(e, plan, idle, HW16)])
    item = 4  # float32
    # each core receives its column minus the 4 elements of it that it idles with
    assert report.relayout_bytes == 16 * (64 - 4) * item
    # all cores receive 60 elements at once over their own link
    assert report.per_op[0].relayout_s == pytest.approx(60 * item / HW16.link_bandwidth + LAT, rel=1e-9)
    # the idle placement (a 4x16 block of B per core) stays allocated while B is re-laid out
    idle_bytes = OpLayout(e, idle).partition_bytes(1)
    active = OpLayout(e, plan).memory_bytes_per_core()
    assert report.peak_sram_bytes_per_core == idle_bytes + active + HW16.shift_buffer_bytes


def test_idle_state_that_does_not_fit_overflows(exprs) -> None:
    e = exprs.matmul(16, 64, 16)
    plan = ExecutionPlan({"n": 16}, ({}, {}, {}))
    idle = ExecutionPlan({}, ({}, {}, {}))  # all of B idles on core 0
    need = (OpLayout(e, idle).partition_bytes(1) + OpLayout(e, plan).memory_bytes_per_core()
            + HW16.shift_buffer_bytes)
    fits = small_chip(16, need, link_latency_s=LAT)
    assert simulate_timing([_resident_program(e, plan, idle, fits)]).peak_sram_bytes_per_core == need
    with pytest.raises(SramOverflowError):
        simulate_timing([_resident_program(e, plan, idle, small_chip(16, need - 1, link_latency_s=LAT))])


def test_placement_grid_matches_the_initial_partitions(exprs) -> None:
    from runtime_sim.contract.relayout import placement_grid

    e = exprs.matmul(16, 64, 16)
    layout = OpLayout(e, ExecutionPlan({"m": 2, "k": 4, "n": 2}, ({}, {"k": 2}, {})))
    layout.validate()
    grid = placement_grid(layout, 1)
    boxes = input_boxes(layout, 1)
    for core in range(layout.num_cores):
        block = np.unravel_index(np.flatnonzero(grid.owner == core), grid.counts)
        for k in zip(*block):  # every block a core is named owner of, it really holds
            lo = np.array(k) * np.array(grid.block)
            assert (boxes.lo[core] == lo).all()
    assert (grid.owner >= 0).all()  # every block of B is held somewhere


def test_large_split_reduction_runs_as_a_pipelined_chain(exprs) -> None:
    e = exprs.matmul(64, 8, 128)
    plan = ExecutionPlan({"k": 8}, ({}, {}, {}))  # 8 replicas of a 32 KiB output partition
    prog = single(e, plan, HW16, constants=("A", "B"))
    report = simulate_timing([prog])
    layout = OpLayout(e, plan)
    pc = layout.partition_bytes(2)
    chunks = math.ceil(pc / HW16.shift_buffer_bytes)
    assert chunks > 1
    assert report.reduction_bytes == 7 * pc  # what the device counts, whichever schedule
    chain = (pc / HW16.link_bandwidth + chunks * LAT) + 6 * (pc / chunks / HW16.link_bandwidth + LAT)
    tree = 3 * (pc / HW16.link_bandwidth + chunks * LAT)
    assert chain < tree
    assert report.transfer_s == pytest.approx(chain, rel=1e-9)
    elems = pc // 4
    adds = ((chunks + 6) * elems / chunks / HW16.vector_flops_per_cycle + HW16.sync_cycles) / HW16.clock_hz
    assert report.per_op[0].reduction_s == pytest.approx(chain + adds, rel=1e-9)
    hosted = single(e, plan, HW16)  # inputs as arguments, so that the device can run it
    assert simulate_timing([hosted]).reduction_bytes == device_stats(hosted)["reduction_bytes"]


def test_cross_chip_shift_pays_the_inter_chip_latency(exprs) -> None:
    """The ring of the test above with latencies: every shift phase costs its capped bytes plus
    the slowest flow's latency, and a flow that crosses chips pays the hop's latency and the
    IPU-Link latency for each of its chunks (``runtime_sim.machine.links.chunk_latency_seconds``)."""
    cap, xlat = 2e9, 3e-7
    report, hw, crossing, pb = _two_chip_ring(exprs, cap, link_latency_s=LAT,
                                              inter_chip_latency_s=xlat)
    chunks = math.ceil(pb / hw.shift_buffer_bytes)
    per_shift = max(pb / hw.link_bandwidth, crossing * pb / cap) + chunks * (LAT + xlat)
    assert report.per_op[0].shift_s == pytest.approx(16 * per_shift, rel=1e-9)
    # without the IPU-Link latency the same shifts are cheaper by exactly that term
    flat = _two_chip_ring(exprs, cap, link_latency_s=LAT, inter_chip_latency_s=0.0)[0]
    assert report.per_op[0].shift_s - flat.per_op[0].shift_s == pytest.approx(16 * chunks * xlat, rel=1e-9)


def test_host_round_trip_times_the_return_leg(exprs) -> None:
    """A region output the host reads goes back chip -> host over the host link when its
    producer ends: its bytes at ``host_bandwidth`` (the network leg is shorter here), and the
    run ends when it has arrived."""
    import dataclasses

    from runtime_sim.contract.errors import DeviceProgramError

    hw = small_chip(16, 256 * 1024, link_latency_s=LAT)
    e = exprs.bias_add(256, 256)
    plan = ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {}))
    prog = single(e, plan, hw, constants=("b",))
    out_bytes = 256 * 256 * 4
    stays = simulate_timing([prog])
    back = simulate_timing([dataclasses.replace(prog, host_outputs=prog.outputs)])
    assert stays.host_out_bytes == 0 and back.host_out_bytes == out_bytes
    op = back.per_op[0]
    assert op.host_out_start_s == pytest.approx(op.end_s)
    assert op.host_out_s == pytest.approx(out_bytes / hw.host_bandwidth, rel=1e-9)
    assert back.total_s == pytest.approx(stays.total_s + out_bytes / hw.host_bandwidth, rel=1e-9)
    assert back.host_s == pytest.approx(stays.host_s + out_bytes / hw.host_bandwidth, rel=1e-9)
    # a region output nobody on the host reads is refused as a host output
    with pytest.raises(DeviceProgramError):
        validate_program(dataclasses.replace(prog, host_outputs=("nope",)), hw)


def test_hbm_bytes_are_distinct_and_delivered_counts_copies(exprs) -> None:
    """B is needed by every core of two chips: each chip reads its copy from its own HBM
    (delivered twice), but it is one tensor (distinct once); A is split, read once."""
    hw = small_chip(16, 256 * 1024, num_chips=2, inter_chip_bandwidth=64e9, hbm_bandwidth=1e12,
                    hbm_controllers=2, link_latency_s=LAT)
    e = exprs.matmul(64, 64, 64)
    plan = ExecutionPlan({"m": 16}, ({}, {}, {}))  # A split on m, B replicated on all 16 cores
    report = simulate_timing([single(e, plan, hw, sources={"A": "hbm", "B": "hbm"})])
    t = 64 * 64 * 4
    assert report.hbm_bytes == pytest.approx(2 * t)
    assert report.hbm_delivered_bytes == pytest.approx(3 * t)
    assert report.per_op[0].hbm_bytes == pytest.approx(2 * t)
    assert report.per_op[0].hbm_delivered_bytes == pytest.approx(3 * t)
    assert report.hbm_utilization == pytest.approx(2 * t / (report.total_s * hw.hbm_bandwidth))
    # the same tensor read by two regions of one run is two tensors (layer weights differ)
    two = simulate_timing([single(e, plan, hw, sources={"A": "hbm", "B": "hbm"})] * 2)
    assert two.hbm_bytes == pytest.approx(4 * t)
    data = report.to_dict(per_op=False)
    assert data["hbm_bytes"] == report.hbm_bytes and data["hbm_delivered_bytes"] == report.hbm_delivered_bytes


def test_operators_far_from_their_lower_bound_are_named(exprs) -> None:
    """A matmul planned onto one core of sixteen is ~16x its FLOP bound: flagged by name and
    kind; the 16-core plan of the same matmul is not."""
    hw = small_chip(16, 1024 * 1024, link_latency_s=LAT)
    e = exprs.matmul(64, 64, 64)
    bad = simulate_timing([single(e, ExecutionPlan({}, ({}, {}, {})), hw, constants=("A", "B"))])
    op = bad.per_op[0]
    peak = hw.num_cores * hw.matrix_flops_per_cycle * hw.clock_hz
    assert op.bound_by == "flops" and op.lower_bound_s == pytest.approx(2 * 64**3 / peak)
    ratio = (op.wait_s + op.duration_s) / op.lower_bound_s
    assert ratio > 10
    assert [r["kind"] for r in bad.slow_kinds] == ["matmul"]
    assert bad.slow_ops[0]["name"] == "op0" and bad.slow_ops[0]["ratio"] == pytest.approx(ratio)
    assert "more than 10x" in bad.table() and "matmul" in bad.table()
    assert bad.to_dict(per_op=False)["slow_kinds"][0]["kind"] == "matmul"
    good = simulate_timing([single(e, ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {})), hw,
                                   constants=("A", "B"))])
    assert good.slow_kinds == [] and good.slow_ops == []
    assert good.op_kinds[0]["ratio"] < 10


def test_split_norm_combine_is_a_gather_and_a_multicast(exprs) -> None:
    """RMS-style statistics split over 8 cores per row: partial sums, then per level a gather
    of the 8 partial statistics to the group's first core (the fastest radix: 8 bytes per
    value, so one round of 7 values through its port beats three binomial rounds, each paying
    a latency and a synchronization) and one multicast back (runtime_sim.machine.links.
    split_combine_seconds)."""
    from runtime_sim.machine.links import combine_radix, split_combine_seconds

    e = exprs.layer_norm(4, 64)
    plan = ExecutionPlan({"i": 2, "j": 8}, ({}, {}, {}, {}))
    prog = single(e, plan, HW16, constants=("X", "gamma", "beta"))
    report = simulate_timing([prog])
    layout = OpLayout(e, plan)
    assert layout.combine_size == 8 and layout.combine_levels() == [2, 2]  # mean, then variance
    stat = 2 * 4  # two rows per core, float32
    assert report.reduction_bytes == layout.reduction_bytes() == 2 * 2 * (2 * 7 * stat)
    assert combine_radix(8, 2, HW16) == 8  # one gather round
    bw, sync = HW16.link_bandwidth, HW16.sync_cycles / HW16.clock_hz
    transfer = 2 * ((7 * stat / bw + LAT) + (stat / bw + LAT))  # per level: gather, multicast
    adds = 2 * (7 * 2 / HW16.vector_flops_per_cycle / HW16.clock_hz + 2 * sync)
    assert report.transfer_s == pytest.approx(transfer, rel=1e-9)
    assert report.per_op[0].reduction_s == pytest.approx(transfer + adds, rel=1e-9)
    assert split_combine_seconds(8, [2, 2], HW16) == pytest.approx(transfer + adds, rel=1e-9)
    # the binomial tree there and back it replaces: three rounds each way
    tree = 2 * 2 * 3 * (stat / bw + LAT + sync) + 2 * 3 * 2 / HW16.vector_flops_per_cycle / HW16.clock_hz
    assert transfer + adds < tree
    assert split_combine_seconds(1, [2, 2], HW16) == 0.0


def _producer_consumer(exprs, hw, chips: int) -> DeviceProgram:
    """Y = X + b on all 16 cores of 4 chips (one row per core: chip k holds rows 4k..4k+3),
    then S = row sums of Y on 4 cores (4 rows each), contiguous or spread over the chips."""
    prod = exprs.bias_add(16, 64)
    cons = exprs.row_sum(16, 64)
    p_plan = ExecutionPlan({"i": 16}, ({}, {}, {}))
    c_plan = ExecutionPlan({"i": 4}, ({}, {}), chips=chips)
    decls = (TensorDecl("X", (16, 64), "float32", "host"), TensorDecl("b", (1, 64), "float32", "host"))
    ops = (OpProgram("op0", prod, p_plan, ("X", "b"), "Y"), OpProgram("op1", cons, c_plan, ("Y",), "S"))
    return DeviceProgram("r0", hw.to_dict(), decls, ("S",), ops)


def test_spread_consumer_relayout_stays_on_chip(exprs) -> None:
    """A producer spread over 4 chips feeds a 4-core consumer. Contiguous, the consumer sits on
    chip 0 and the 12 rows the other chips hold cross the inter-chip links (12 x 64 x 4 bytes);
    spread one core per chip, each core's 4 rows are on its own chip: nothing crosses (and the
    first of them is already on the core)."""
    hw = small_chip(16, 256 * 1024, num_chips=4, inter_chip_bandwidth=1e9)
    row = 64 * 4
    contiguous = simulate_timing([_producer_consumer(exprs, hw, 1)]).per_op[1]
    spread = simulate_timing([_producer_consumer(exprs, hw, 4)]).per_op[1]
    # contiguous: core 0 holds row 0 of its rows 0-3, cores 1-3 none of theirs; spread: the
    # core at the start of chip k holds row 4k of its rows 4k..4k+3
    assert contiguous.relayout_bytes == 15 * row and spread.relayout_bytes == 12 * row
    assert contiguous.inter_chip_bytes == pytest.approx(12 * row)
    assert spread.inter_chip_bytes == 0
    assert spread.relayout_s < contiguous.relayout_s
    from runtime_sim.functional.device import (  # the functional device agrees on the answer
        SimulatedDevice,
    )

    x, b = np.ones((16, 64), np.float32), np.arange(64, dtype=np.float32)[None, :]
    (out,) = SimulatedDevice().run(_producer_consumer(exprs, hw, 4), [x, b])
    np.testing.assert_allclose(out, (x + b).sum(axis=1), rtol=1e-5)


def test_trace_draws_a_spread_operator_on_every_chip_it_uses(exprs) -> None:
    from runtime_sim.timing.trace import timing_trace

    hw = small_chip(16, 256 * 1024, num_chips=4, inter_chip_bandwidth=1e9)
    for chips, expected in ((1, [(0,)]), (4, [(0, 1, 2, 3)])):
        report = simulate_timing([_producer_consumer(exprs, hw, chips)])
        consumer = report.per_op[1]
        assert [consumer.chips] == expected
        drawn = {e["pid"] for e in timing_trace(report)
                 if e.get("ph") == "X" and e.get("cat") == "op"
                 and e["args"]["op"] == consumer.name and e["name"] == consumer.label}
        assert len(drawn) == len(expected[0])  # one "cores" span per chip it runs on


def test_many_small_replicas_gather_in_a_wide_tree(exprs) -> None:
    """16 replicas of a 64-byte partial sum: the fastest gather radix takes several values per
    round through the root's port (fewer rounds, each one latency and one synchronization);
    the simulator routes that tree and charges the closed form of runtime_sim.machine.links."""
    from runtime_sim.machine.links import replica_reduction_schedule, replica_reduction_seconds

    e = exprs.matmul(4, 256, 4)
    plan = ExecutionPlan({"k": 16}, ({}, {}, {}))
    prog = single(e, plan, HW16, constants=("A", "B"))
    report = simulate_timing([prog])
    layout = OpLayout(e, plan)
    pc = layout.partition_bytes(2)
    elems = pc // 4
    s = replica_reduction_schedule(16, pc, elems, HW16)
    assert s.tree_radix > 2 and s.tree_rounds < 4
    assert report.reduction_bytes == layout.reduction_bytes() == 15 * pc
    assert report.per_op[0].reduction_s == pytest.approx(
        replica_reduction_seconds(16, pc, elems, HW16), rel=1e-9)
