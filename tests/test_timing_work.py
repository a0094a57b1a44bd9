"""Work items of a timing run (runtime_sim.timing.work): where each input comes from and what it
costs -- HBM and host loads, re-layouts between operators, model state resident on chip."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from runtime_sim.contract.errors import SramOverflowError
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.machine.topology import make_topology
from runtime_sim.timing import (
    canonical_grid,
    input_boxes,
    producer_grid,
    relayout,
    relayout_flows,
    simulate_timing,
)
from tvm_icca.testing.timing_programs import one_op_program, producer_consumer_program

LAT = 1e-7  # link latency used where the closed forms should show it
HW16 = small_chip(16, link_latency_s=LAT)


def test_hbm_load_is_limited_by_controller_bandwidth(exprs) -> None:
    hbm_bw = 20e9  # slower than the 16 core links together (88 GB/s)
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=hbm_bw, hbm_controllers=4, sync_cycles=0)
    e = exprs.bias_add(256, 256)  # X is split into 16 distinct blocks, b is tiny
    plan = ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {}))
    prog = one_op_program(e, plan, hw, sources={"X": "hbm", "b": "hbm"})
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
    report = simulate_timing([one_op_program(e, plan, slow, sources={"X": "hbm", "b": "hbm"})])
    assert report.load_bound_by == "hbm" and report.per_op[0].load_bound_by == "hbm"
    assert report.per_op[0].hbm_s == pytest.approx(nbytes / 1e9, rel=0.01)
    capped = small_chip(16, 256 * 1024, hbm_bandwidth=1e15, hbm_injection_bandwidth=1e8, **chip)
    report = simulate_timing([one_op_program(e, plan, capped, sources={"X": "hbm", "b": "hbm"})])
    assert report.load_bound_by == "injection" and list(report.load_bound_s) == ["injection"]
    assert report.per_op[0].hbm_s == pytest.approx(nbytes / 4 / 1e8, rel=0.01)
    assert "loads     bound by injection" in report.table()
    assert json.loads(report.to_json())["load_bound_by"] == "injection"


def test_replicated_hbm_data_is_read_once_per_chip(exprs) -> None:
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=1e12, hbm_controllers=4)
    e = exprs.matmul(64, 64, 64)
    plan = ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {}))  # A and B replicated 4x each
    report = simulate_timing([one_op_program(e, plan, hw, sources={"A": "hbm", "B": "hbm"})])
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
        prog = one_op_program(e, ExecutionPlan(F, temporal, (), order), hw, sources={"A": "host", "B": "hbm"})
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
    report = simulate_timing([one_op_program(e, plan, hw, constants=("b",))])
    assert hw.host_bandwidth == 8e9  # T10 Table 3
    assert report.host_in_bytes == 256 * 256 * 4
    assert report.host_s == pytest.approx(256 * 256 * 4 / 8e9, rel=0.01)


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
    in_place = simulate_timing([one_op_program(e, blocks, HW16, sources={"X": "chip"}, constants=("b",))])
    assert in_place.relayout_bytes == 0 and in_place.host_in_bytes == 0
    cols = ExecutionPlan({"j": 16}, ({}, {}, {}))  # each core needs a column strip of 4 blocks
    on_chip = simulate_timing([one_op_program(e, cols, HW16, sources={"X": "chip"}, constants=("b",))])
    # core c needs columns 4c..4c+3 of all rows; it holds block (c // 4, c % 4) of the 4x4
    # canonical grid, which meets its strip only when c // 4 == c % 4 (16 rows x 4 columns)
    assert on_chip.relayout_bytes == 4 * (16 * 64 * 4 - 4 * 16 * 4)
    from_host = simulate_timing([one_op_program(e, cols, HW16, sources={"X": "host"}, constants=("b",))])
    assert on_chip.host_in_bytes == 0 and from_host.host_in_bytes == 64 * 64 * 4
    assert on_chip.total_s < from_host.total_s


def test_hbm_input_without_hbm_is_an_error(exprs) -> None:
    from runtime_sim.contract.errors import DeviceProgramError

    e = exprs.matmul(16, 16, 16)
    prog = one_op_program(e, ExecutionPlan({"m": 2}, ({}, {}, {})), HW16, sources={"A": "hbm"})
    with pytest.raises(DeviceProgramError, match="no HBM"):
        simulate_timing([prog])
    host = one_op_program(e, ExecutionPlan({"m": 2}, ({}, {}, {})), HW16)
    bad = DeviceProgram.from_dict({**host.to_dict(), "ops": [
        {**host.ops[0].to_dict(), "input_names": ["A", "nope"]}]})
    with pytest.raises(DeviceProgramError, match="unknown tensor 'nope'"):
        simulate_timing([bad])


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


def test_hbm_bytes_are_distinct_and_delivered_counts_copies(exprs) -> None:
    """B is needed by every core of two chips: each chip reads its copy from its own HBM
    (delivered twice), but it is one tensor (distinct once); A is split, read once."""
    hw = small_chip(16, 256 * 1024, num_chips=2, inter_chip_bandwidth=64e9, hbm_bandwidth=1e12,
                    hbm_controllers=2, link_latency_s=LAT)
    e = exprs.matmul(64, 64, 64)
    plan = ExecutionPlan({"m": 16}, ({}, {}, {}))  # A split on m, B replicated on all 16 cores
    report = simulate_timing([one_op_program(e, plan, hw, sources={"A": "hbm", "B": "hbm"})])
    t = 64 * 64 * 4
    assert report.hbm_bytes == pytest.approx(2 * t)
    assert report.hbm_delivered_bytes == pytest.approx(3 * t)
    assert report.per_op[0].hbm_bytes == pytest.approx(2 * t)
    assert report.per_op[0].hbm_delivered_bytes == pytest.approx(3 * t)
    assert report.hbm_utilization == pytest.approx(2 * t / (report.total_s * hw.hbm_bandwidth))
    # the same tensor read by two regions of one run is two tensors (layer weights differ)
    two = simulate_timing([one_op_program(e, plan, hw, sources={"A": "hbm", "B": "hbm"})] * 2)
    assert two.hbm_bytes == pytest.approx(4 * t)
    data = report.to_dict(per_op=False)
    assert data["hbm_bytes"] == report.hbm_bytes and data["hbm_delivered_bytes"] == report.hbm_delivered_bytes


def test_spread_consumer_relayout_stays_on_chip() -> None:
    """A producer spread over 4 chips feeds a 4-core consumer. Contiguous, the consumer sits on
    chip 0 and the 12 rows the other chips hold cross the inter-chip links (12 x 64 x 4 bytes);
    spread one core per chip, each core's 4 rows are on its own chip: nothing crosses (and the
    first of them is already on the core)."""
    hw = small_chip(16, 256 * 1024, num_chips=4, inter_chip_bandwidth=1e9)
    row = 64 * 4
    contiguous = simulate_timing([producer_consumer_program(hw, 1)]).per_op[1]
    spread = simulate_timing([producer_consumer_program(hw, 4)]).per_op[1]
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
    (out,) = SimulatedDevice().run(producer_consumer_program(hw, 4), [x, b])
    np.testing.assert_allclose(out, (x + b).sum(axis=1), rtol=1e-5)
