"""One operator's time (runtime_sim.timing.opcost): the closed-form shift schedule against walking
every step, compute at peak, shifts and replica reductions in closed form, chip crossings."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.machine.topology import make_topology
from runtime_sim.timing import op_cost, shift_schedule, simulate_timing
from schedules import template_for
from tvm_icca.testing.timing_programs import one_op_program

LAT = 1e-7  # link latency used where the closed forms should show it
HW16 = small_chip(16, link_latency_s=LAT)


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


def test_compute_bound_matmul_runs_at_peak(exprs) -> None:
    hw = small_chip(16, 1024 * 1024, sync_cycles=0)
    e = exprs.matmul(256, 256, 256, dtype="float16")
    prog = one_op_program(e, ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {})), hw, constants=("A", "B"))
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
    prog = one_op_program(e, plan, HW16, constants=("A", "B"))
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


def test_split_reduction_is_a_reduce_scatter_and_gather(exprs) -> None:
    """8 replicas of a 1 KiB partial sum: Rabenseifner's reduce (runtime_sim.machine.links) --
    every replica sends each other its eighth and sums the eighths it receives, then ring 0
    gathers the sums -- beats the binomial tree's three rounds of a whole partition."""
    from tests.test_timing import device_stats  # the functional device's counts

    e = exprs.matmul(16, 64, 16)
    plan = ExecutionPlan({"k": 8}, ({}, {}, {}))
    prog = one_op_program(e, plan, HW16, constants=("A", "B"))
    report = simulate_timing([prog])
    layout = OpLayout(e, plan)
    pc = layout.partition_bytes(2)  # 1 KiB: one chunk
    piece = pc / 8
    assert report.reduction_bytes == 7 * pc + 7 * piece  # the pieces, then the gathered sums
    assert layout.reduction_bytes() == 7 * pc  # a tree's or a chain's count
    transfer = 2 * (7 * piece / HW16.link_bandwidth + LAT)
    assert report.transfer_s == pytest.approx(transfer, rel=1e-9)
    adds = (7 * (16 * 16 // 8) / HW16.vector_flops_per_cycle + 2 * HW16.sync_cycles) / HW16.clock_hz
    assert report.per_op[0].reduction_s == pytest.approx(transfer + adds, rel=1e-9)
    tree = 3 * (pc / HW16.link_bandwidth + LAT
                + (16 * 16 / HW16.vector_flops_per_cycle + HW16.sync_cycles) / HW16.clock_hz)
    assert transfer + adds < tree
    hosted = one_op_program(e, plan, HW16)  # the device counts the bytes of the same schedule
    assert device_stats(hosted)["reduction_bytes"] == simulate_timing([hosted]).reduction_bytes


def _two_chip_ring(exprs, cap: float, **latencies):
    """A ring that spans two chips (F_op m=16: B is shared by all 16 cores and rotates on k in
    one ring of 16): the report, the hardware, its shifts crossing chips and B's partition."""
    hw = small_chip(16, num_chips=2, inter_chip_bandwidth=cap, **latencies)
    e = exprs.matmul(16, 256, 16)
    plan = ExecutionPlan({"m": 16}, ({}, {"k": 16}, {}))
    layout = OpLayout(e, plan)
    report = simulate_timing([one_op_program(e, plan, hw, constants=("A", "B"))])
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


def test_large_split_reduction_runs_as_a_pipelined_chain(exprs) -> None:
    """4 replicas of a 48 KiB partition (6 chunks): the chain's fill is two chunks, less than
    the reduce-scatter's extra half partition (on a chip whose vector unit adds 16 times
    faster than ``hw``'s, so that the transfers, not the adds, decide)."""
    hw = small_chip(16, link_latency_s=LAT, vector_flops_per_cycle=16 * HW16.vector_flops_per_cycle)
    from runtime_sim.machine.links import REDUCTION_SCHEDULES, fastest_reduction

    e = exprs.matmul(48, 4, 256)
    plan = ExecutionPlan({"k": 4}, ({}, {}, {}))  # 4 replicas of a 48 KiB output partition
    prog = one_op_program(e, plan, hw, constants=("A", "B"))
    report = simulate_timing([prog])
    layout = OpLayout(e, plan)
    pc = layout.partition_bytes(2)
    chunks = math.ceil(pc / hw.shift_buffer_bytes)
    assert chunks == 6
    elems = pc // 4
    assert REDUCTION_SCHEDULES[int(fastest_reduction(4, pc, elems, hw)[0])] == "chain"
    assert report.reduction_bytes == 3 * pc  # what the device counts for a chain
    chain = (pc / hw.link_bandwidth + chunks * LAT) + 2 * (pc / chunks / hw.link_bandwidth + LAT)
    tree = 2 * (pc / hw.link_bandwidth + chunks * LAT)
    scatter = 2 * (3 * pc / 4 / hw.link_bandwidth + chunks / 4 * LAT)
    assert chain < min(tree, scatter)
    assert report.transfer_s == pytest.approx(chain, rel=1e-9)
    adds = ((chunks + 2) * elems / chunks / hw.vector_flops_per_cycle + hw.sync_cycles) / hw.clock_hz
    assert report.per_op[0].reduction_s == pytest.approx(chain + adds, rel=1e-9)
    hosted = one_op_program(e, plan, hw)  # inputs as arguments, so that the device can run it
    from tests.test_timing import device_stats  # the functional device's counts

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


def test_split_norm_combine_is_a_gather_and_a_multicast(exprs) -> None:
    """RMS-style statistics split over 8 cores per row: partial sums, then per level a gather
    of the 8 partial statistics to the group's first core (the fastest radix: 8 bytes per
    value, so one round of 7 values through its port beats three binomial rounds, each paying
    a latency and a synchronization) and one multicast back (runtime_sim.machine.links.
    split_combine_seconds)."""
    from runtime_sim.machine.links import combine_radix, split_combine_seconds

    e = exprs.layer_norm(4, 64)
    plan = ExecutionPlan({"i": 2, "j": 8}, ({}, {}, {}, {}))
    prog = one_op_program(e, plan, HW16, constants=("X", "gamma", "beta"))
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


def test_many_small_replicas_gather_in_a_wide_tree(exprs) -> None:
    """16 replicas of a 32-byte partial sum: the fastest gather radix takes several values per
    round through the root's port (fewer rounds, each one latency and one synchronization;
    a reduce-scatter's two rounds cost more than the bytes they save);
    the simulator routes that tree and charges the closed form of runtime_sim.machine.links."""
    from runtime_sim.machine.links import replica_reduction_schedule, replica_reduction_seconds

    e = exprs.matmul(2, 256, 4)
    plan = ExecutionPlan({"k": 16}, ({}, {}, {}))
    prog = one_op_program(e, plan, HW16, constants=("A", "B"))
    report = simulate_timing([prog])
    layout = OpLayout(e, plan)
    pc = layout.partition_bytes(2)
    elems = pc // 4
    s = replica_reduction_schedule(16, pc, elems, HW16)
    assert s.tree_radix > 2 and s.tree_rounds < 4
    assert report.reduction_bytes == layout.reduction_bytes() == 15 * pc
    assert report.per_op[0].reduction_s == pytest.approx(
        replica_reduction_seconds(16, pc, elems, HW16), rel=1e-9)


@pytest.mark.parametrize("chips", [2, 4])
def test_split_reduction_over_chips_runs_two_level(exprs, chips) -> None:
    """16 replicas of a 16 KiB partial sum, ``16 / chips`` on each chip, the fabric a few
    links wide: a one-level reduce-scatter, fastest alone on its links, sends most pieces
    across chips and waits on the fabric; the two-level schedule (runtime_sim.machine.links)
    sums each chip's replicas on the chip, then the leaders' sums across chips, and routed
    takes its closed form exactly (no flow shares a port or the fabric beyond its own rate).
    The functional device counts the bytes of that schedule."""
    from runtime_sim.machine.links import REDUCTION_SCHEDULES, reduction_schedule_seconds
    from tests.test_timing import device_stats

    hw = small_chip(16, num_chips=chips, inter_chip_bandwidth=chips * HW16.link_bandwidth,
                    link_latency_s=LAT, inter_chip_latency_s=3e-8,
                    vector_flops_per_cycle=16 * HW16.vector_flops_per_cycle)
    e = exprs.matmul(64, 64, 64)
    plan = ExecutionPlan({"k": 16}, ({}, {}, {}))
    report = simulate_timing([one_op_program(e, plan, hw, constants=("A", "B"))])
    layout = OpLayout(e, plan, hw.cores_per_chip)
    pc = layout.partition_bytes(2)
    rows = reduction_schedule_seconds(16, pc, pc // 4, hw, chips)
    assert REDUCTION_SCHEDULES[3] == "two-level" and min(rows[:3]) < rows[3]
    assert report.per_op[0].reduction_s == pytest.approx(rows[3], rel=1e-9)
    # one partial sum per chip off the owner's crosses: with two leaders one transfer, with
    # four a reduce-scatter among them, whose gathered sums cross too
    least = (chips - 1) * pc
    assert report.inter_chip_bytes == (least if chips == 2 else least * (1 + 1 / chips))
    hosted = one_op_program(e, plan, hw)
    assert device_stats(hosted)["reduction_bytes"] == simulate_timing([hosted]).reduction_bytes
    # the device sums the same replicas whatever the schedule: float32 within its tolerance
    from runtime_sim.functional.device import SimulatedDevice

    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(d.shape).astype(d.dtype) for d in hosted.inputs)
    np.testing.assert_allclose(SimulatedDevice().run(hosted, [a, b])[0], a @ b, rtol=1e-5, atol=1e-5)
