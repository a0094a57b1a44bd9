"""runtime_sim.timing.floors: every resource's floor against a program that saturates it.

Each test builds a tiny chip and program that one resource bounds, computes that resource's
floor by hand, and checks the report: the named floor equals the closed form, the run takes
at least every floor, ``run_bound_by`` names the resource, and the utilizations lie in [0, 1]
(reaching ~1 where the resource they measure is the one saturated).
"""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram
from runtime_sim.machine.topology import make_topology
from runtime_sim.timing import simulate_timing
from runtime_sim.timing.floors import (
    FLOOR_KEYS,
    block_receive_bytes,
    bound_name,
    busy_fraction,
    execute_bound_seconds,
    peak_seconds,
    receive_capacity,
    run_bound,
    weight_receive_bytes,
)

UTILIZATIONS = ("flops_utilization", "hbm_utilization", "interconnect_utilization",
                "link_bandwidth_utilization")
#: What the tests leave out of a saturating run: no synchronization, no hop latency.
QUIET = dict(sync_cycles=0, link_latency_s=0.0)
#: ... and compute in almost no time (for a test of another resource)
FAST = dict(QUIET, vector_flops_per_cycle=1 << 16, matrix_flops_per_cycle=1 << 20)


def single(expr, plan, hw, sources=None, resident=()) -> DeviceProgram:
    """One operator; its inputs from ``sources`` (name -> "hbm" or "host"), or kept on chip
    (``resident``: model state in the operator's placement, moving nowhere)."""
    sources = sources or {}
    consts = {t.name: {"dtype": t.dtype, "shape": list(t.shape),
                       "source": sources.get(t.name, "resident")}
              for t in expr.inputs if t.name in resident or t.name in sources}
    op = OpProgram("op0", expr, plan, tuple(t.name for t in expr.inputs), expr.output.name)
    return DeviceProgram("r0", hw.to_dict(), (), (expr.output.name,), (op,), constants=consts)


def check(report, bound: str):
    """The invariants of every run, and that ``bound`` bounds it; its floors (a dict)."""
    data = report.to_dict(per_op=False)
    floors = {k: data[k] for k in FLOOR_KEYS}
    for key, value in floors.items():
        assert 0 <= value <= report.total_s * (1 + 1e-9), key
    for key in UTILIZATIONS:
        assert 0 <= data[key] <= 1, key
    assert data["run_bound_by"] == bound, floors
    assert data["floor_s"] == max(floors.values()) == floors[[k for k in FLOOR_KEYS
                                                              if bound_name(k) == bound][0]]
    if data["remainder"]:
        assert sum(data["remainder"].values()) == pytest.approx(report.total_s, rel=1e-9)
        assert all(v >= 0 for v in data["remainder"].values())
    else:
        assert report.total_s <= 1.5 * data["floor_s"]
    return floors


def test_compute(exprs):
    hw = small_chip(16, 1024 * 1024, **QUIET)
    e = exprs.matmul(256, 256, 256, dtype="float16")
    report = simulate_timing([single(e, ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {})), hw,
                                     resident=("A", "B"))])
    floors = check(report, "compute")  # ties with compute units: a matmul is matrix work
    peak = 2 * 256 ** 3 / (16 * hw.matrix_flops_per_cycle * hw.clock_hz)
    assert floors["compute_floor_s"] == pytest.approx(peak)
    assert floors["compute_units_floor_s"] == pytest.approx(peak)
    assert report.total_s == pytest.approx(peak, rel=0.01)
    assert report.flops_utilization == pytest.approx(1.0, rel=0.01)


def test_compute_units(exprs):
    """An addition runs on the vector unit: its floor at the vector peak is above the matrix
    one, and the run is bound by it."""
    hw = small_chip(16, 1024 * 1024, **QUIET)
    e = exprs.bias_add(256, 256)
    report = simulate_timing([single(e, ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {})), hw,
                                     resident=("X", "b"))])
    floors = check(report, "compute units")
    vector = 256 * 256 / (16 * hw.vector_flops_per_cycle * hw.clock_hz)
    assert floors["compute_units_floor_s"] == pytest.approx(vector)
    assert floors["compute_floor_s"] == pytest.approx(256 * 256 / hw.peak_matrix_flops)
    assert report.total_s == pytest.approx(vector, rel=0.05)


def test_hbm(exprs):
    hw = small_chip(16, 256 * 1024, hbm_bandwidth=1e9, hbm_controllers=4, **FAST)
    e = exprs.bias_add(256, 256)
    report = simulate_timing([single(e, ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {})), hw,
                                     sources={"X": "hbm", "b": "hbm"})])
    floors = check(report, "hbm")
    nbytes = 256 * 256 * 4 + 256 * 4
    assert floors["hbm_floor_s"] == pytest.approx(nbytes / 1e9)
    assert report.hbm_utilization == pytest.approx(1.0, rel=0.02)


def test_host(exprs):
    hw = small_chip(16, 256 * 1024, **FAST)
    e = exprs.bias_add(256, 256)
    report = simulate_timing([single(e, ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {})), hw,
                                     sources={"X": "host"}, resident=("b",))])
    floors = check(report, "host")
    assert floors["host_floor_s"] == pytest.approx(256 * 256 * 4 / hw.host_bandwidth)
    assert report.total_s == pytest.approx(floors["host_floor_s"], rel=0.02)


def _rotation(exprs, hw):
    """B (256 x 16) shared by 16 cores rotates on k in one ring of 16: every step, every core
    receives a 1 KiB partition on its port while computing almost nothing."""
    e = exprs.matmul(16, 256, 16)
    plan = ExecutionPlan({"m": 16}, ({}, {"k": 16}, {}))
    return simulate_timing([single(e, plan, hw, resident=("A", "B"))]), OpLayout(e, plan)


def test_interconnect_ports(exprs):
    hw = small_chip(16, **FAST)
    report, layout = _rotation(exprs, hw)
    floors = check(report, "interconnect")
    received = 16 * 16 * layout.partition_bytes(1)  # 16 shifts, 16 receivers
    assert report.shift_bytes == received
    assert floors["interconnect_floor_s"] == pytest.approx(received / (16 * hw.link_bandwidth))
    assert report.total_s == pytest.approx(floors["interconnect_floor_s"], rel=0.03)
    assert report.interconnect_utilization == pytest.approx(1.0, rel=0.03)
    assert report.link_bandwidth_utilization == pytest.approx(1.0, rel=0.03)


def test_hop_latency_is_the_remainder_and_not_link_busy(exprs):
    """The same rotation with a long hop latency: the links are busy only while bytes move,
    so the interconnect utilization drops (it counted latency before), and the report names
    the hop latency as what the time beyond the floor is."""
    hw = small_chip(16, sync_cycles=0, link_latency_s=2e-6)
    report, _ = _rotation(exprs, hw)
    floors = check(report, "interconnect")
    assert report.total_s > 1.5 * floors["interconnect_floor_s"]
    parts = report.remainder
    assert max(parts, key=parts.get) == "hop latency"
    assert parts["link transfer"] == pytest.approx(floors["interconnect_floor_s"], rel=1e-6)
    assert report.interconnect_utilization == pytest.approx(
        floors["interconnect_floor_s"] / report.total_s, rel=0.01)
    table = report.table()
    assert "bound by  interconnect" in table and "remainder hop latency" in table
    assert report.to_dict(per_op=False)["remainder"] == parts


def _mesh_hbm(exprs, **chip):
    """bias_add's 256 KiB from HBM over a 16-core mesh (4 controllers), fast HBM."""
    hw = small_chip(16, 256 * 1024, topology="mesh", hbm_bandwidth=1e15, hbm_controllers=4,
                    **FAST, **chip)
    e = exprs.bias_add(256, 256)
    report = simulate_timing([single(e, ExecutionPlan({"i": 4, "j": 4}, ({}, {}, {})), hw,
                                     sources={"X": "hbm", "b": "hbm"})])
    return report, hw


def test_edge_ports(exprs):
    """Controllers on the 4 sides of a 4 x 4 mesh: 2 x (4 + 4) = 16 edge ports, each at link
    bandwidth, carry every byte read."""
    report, hw = _mesh_hbm(exprs)
    floors = check(report, "edge ports")
    assert floors["edge_ports_floor_s"] == pytest.approx(
        report.hbm_delivered_bytes / (16 * hw.link_bandwidth))
    assert report.hbm_delivered_bytes == pytest.approx(256 * 256 * 4 + 256 * 4)
    assert report.total_s == pytest.approx(floors["edge_ports_floor_s"], rel=0.05)
    assert report.load_bound_by == "edge ports"


def test_controller_ports(exprs):
    """Controllers inside a 4 x 6 grid, in columns 0 and 5 at rows 1 and 3: 3 + 2 + 3 + 2 = 10
    links leave their nodes. Sliced evenly, the 2-link controllers bind at 8 links' worth."""
    report, hw = _mesh_hbm(exprs, hbm_placement="columns:0,5")
    floors = check(report, "controller ports")
    sent = report.hbm_delivered_bytes
    assert floors["controller_ports_floor_s"] == pytest.approx(sent / (10 * hw.link_bandwidth))
    assert floors["edge_ports_floor_s"] == 0
    assert report.total_s >= sent / (8 * hw.link_bandwidth)


def test_injection(exprs):
    report, hw = _mesh_hbm(exprs, hbm_placement="columns:0,5", hbm_injection_bandwidth=1e8)
    floors = check(report, "injection")
    assert floors["injection_floor_s"] == pytest.approx(report.hbm_delivered_bytes / (4 * 1e8))
    assert report.total_s == pytest.approx(floors["injection_floor_s"], rel=0.02)


def test_bisection(exprs):
    """Rows -> columns on a 4 x 4 mesh (a transpose: every core sends a 1 KiB piece to every
    other). Left to right, each row's middle link carries its 2 left cores' pieces for the 8
    right cores: 16 KiB, and so does every link of the cut."""
    hw = small_chip(16, 256 * 1024, topology="mesh", **FAST)
    x = exprs.bias_add(256, 256)
    none = ({}, {}, {})
    ops = (OpProgram("rows", x, ExecutionPlan({"i": 16}, none), ("X", "b"), "Y"),
           OpProgram("cols", x, ExecutionPlan({"j": 16}, none), ("Y", "b"), "Z"))
    consts = {n: {"dtype": "float32", "shape": s, "source": "resident"}
              for n, s in (("X", [256, 256]), ("b", [1, 256]))}
    report = simulate_timing([DeviceProgram("t", hw.to_dict(), (), ("Z",), ops, constants=consts)])
    floors = check(report, "bisection")
    piece = 16 * 16 * 4
    assert report.relayout_bytes == 16 * 15 * piece
    assert floors["bisection_floor_s"] == pytest.approx(2 * 8 * piece / hw.link_bandwidth)
    # 4 x 4 mesh: 48 links into cores, 16 edge ports of the controllers-less host link
    topo = make_topology(hw)
    assert receive_capacity(hw, topo) == pytest.approx((48 + 16) * hw.link_bandwidth)
    assert report.total_s == pytest.approx(floors["bisection_floor_s"], rel=0.05)
    assert report.interconnect_utilization == pytest.approx(1.0, rel=0.05)


def test_inter_chip(exprs):
    """A ring over two chips: its crossing shifts share a 2 GB/s inter-chip cap."""
    cap = 2e9
    hw = small_chip(16, num_chips=2, inter_chip_bandwidth=cap, **FAST)
    e = exprs.matmul(16, 256, 16)
    plan = ExecutionPlan({"m": 16}, ({}, {"k": 16}, {}))
    layout = OpLayout(e, plan)
    report = simulate_timing([single(e, plan, hw, resident=("A", "B"))])
    src = layout.shifts_after({"k": 0}, ("k",))[0].source
    chip = np.arange(16) // 8
    crossing = int((chip[src] != chip).sum())
    floors = check(report, "inter-chip")
    crossed = 16 * crossing * layout.partition_bytes(1)
    assert report.inter_chip_bytes == pytest.approx(crossed)
    assert floors["inter_chip_floor_s"] == pytest.approx(crossed / cap)
    assert report.total_s == pytest.approx(floors["inter_chip_floor_s"], rel=0.03)


@pytest.mark.parametrize("chip, design", [
    (dict(topology="mesh"), "elk-full"),
    (dict(topology="mesh", hbm_placement="columns:0,5"), "static"),
    (dict(topology="mesh"), "ideal"),
    (dict(num_chips=2, inter_chip_bandwidth=20e9), "elk-full"),
    (dict(topology="mesh", mesh_torus=True, num_chips=2, inter_chip_bandwidth=20e9), "basic"),
])
def test_every_floor_bounds_a_model(chip, design):
    """A tiny Llama decode on mesh chips, HBM inside the grid, two chips: every floor at most
    the time, every utilization in [0, 1]."""
    import tvm_icca

    hw = small_chip(16, hbm_bandwidth=4e10, hbm_controllers=4, **chip)
    workload = tvm_icca.get_workload("llama2-7b", tiny=True, context=64, num_layers=1)
    report = tvm_icca.compile_programs(workload, hw, preload=design, progress=False,
                                       jobs=1).simulate(progress=False)
    data = report.to_dict(per_op=False)
    bound, floor = run_bound({k: data[k] for k in FLOOR_KEYS})
    check(report, bound)
    assert floor > 0 and data["floor_s"] == floor


def test_busy_fraction_counts_an_instant_once():
    """Against a dense sampling of [0, total]: overlapping windows whose rates add past 1 are
    busy at most all of the time."""
    rng = np.random.default_rng(3)
    total = 10.0
    windows = []
    for _ in range(30):
        a, b = sorted(rng.uniform(0, total, 2))
        windows.append((a, b, rng.uniform(0, 1.2) * (b - a)))
    t = np.linspace(0, total, 200_001)[:-1] + total / 400_000
    rate = np.zeros_like(t)
    for a, b, busy in windows:
        rate += np.where((t >= a) & (t < b), min(1.0, busy / (b - a)), 0.0)
    expected = float(np.minimum(rate, 1.0).mean())
    assert busy_fraction(total, windows) == pytest.approx(expected, abs=1e-3)
    assert busy_fraction(1.0, [(0.0, 1.0, 1.0), (0.0, 1.0, 1.0)]) == 1.0
    assert busy_fraction(2.0, [(1.0, 1.0, 0.5)]) == pytest.approx(0.25)
    assert busy_fraction(0.0, windows) == 0.0


@pytest.mark.parametrize("torus", [False, True])
def test_cut_bytes_follow_the_routes(torus):
    """One flow across the middle of a 4 x 4 grid each way: on a mesh it crosses the middle
    link; on a torus the shorter way round is the wrap link, which crosses the same cut."""
    hw = small_chip(16, topology="mesh", mesh_torus=torus)
    topo = make_topology(hw)
    west, east = topo.core_at(0, 0, 0), topo.core_at(0, 0, 3)
    top, bottom = topo.core_at(0, 0, 1), topo.core_at(0, 3, 1)
    flows = ((west, east, (1.0, 0.0, 0.0, 0.0)), (east, west, (0.0, 1.0, 0.0, 0.0)),
             (top, bottom, (0.0, 0.0, 1.0, 0.0)), (bottom, top, (0.0, 0.0, 0.0, 1.0)))
    for src, dst, crossed in flows:
        phase = topo.phase(np.array([src]), np.array([dst]), np.array([64.0]))
        assert phase.cut_bytes == tuple(64.0 * c for c in crossed)
        assert phase.scaled(3).cut_bytes == tuple(192.0 * c for c in crossed)
    # a flow that stays in its half crosses nothing
    assert topo.phase(np.array([west]), np.array([top]), np.array([64.0])).cut_bytes == (0.0,) * 4


def _block_receive_by_search(rows, k, cols, cores, in_bytes, out_bytes):
    """The least per-core receive over every integer block grid ``(k / dk) x (cols / dn)`` of
    exactly ``cores`` blocks: the activation slice, and a partial sum when ``dk < k``."""
    best = None
    for gk in range(1, cores + 1):
        gn = cores // gk
        if gk * gn != cores or k % gk or cols % gn:
            continue
        dk, dn = k // gk, cols // gn
        got = in_bytes * rows * dk + (out_bytes * rows * dn if dk < k else 0)
        best = got if best is None else min(best, got)
    return best


@pytest.mark.parametrize("rows,k,cols,cores,in_bytes,out_bytes", [
    (4, 64, 64, 16, 2, 2),     # sqrt(A) = 16 divides both sides: the closed form is reached
    (8, 256, 64, 16, 2, 2),    # a tall weight: square 32 x 32 blocks
    (4, 64, 64, 16, 2, 4),     # float32 partial sums: longer dk blocks
    (32, 8, 512, 16, 2, 2),    # short k: whole columns (no partial sums) win
    (3, 96, 40, 12, 4, 4),     # no square block: the closed form is below every grid
])
def test_block_receive_against_every_block_grid(rows, k, cols, cores, in_bytes, out_bytes):
    closed = block_receive_bytes(rows, k, cols, cores, in_bytes, out_bytes)
    searched = _block_receive_by_search(rows, k, cols, cores, in_bytes, out_bytes)
    area = k * cols / cores
    expected = min(in_bytes * rows * k, 2 * rows * np.sqrt(in_bytes * out_bytes * area)
                   if np.sqrt(out_bytes * area / in_bytes) < k else np.inf)
    assert closed == pytest.approx(expected)
    assert closed <= searched * (1 + 1e-12)
    if (rows, k, cols, cores, out_bytes) in ((4, 64, 64, 16, 2), (8, 256, 64, 16, 2),
                                             (32, 8, 512, 16, 2)):
        assert closed == pytest.approx(searched)


def test_weight_receive_of_a_decode_matmul(exprs):
    """x[4, 64] @ w[64, 64] on 16 cores: 16 x 16 blocks, 4 x 16 activations and a 4 x 16
    partial sum in float16 per core; the bias in the epilogue is not an operand of the
    product; products sharing a batch axis (attention's) have no weight operand."""
    hw = small_chip(16, 1024 * 1024, **QUIET)
    e = exprs.matmul(4, 64, 64, dtype="float16")
    assert weight_receive_bytes(e, 16) == pytest.approx(2 * 4 * 16 * 2)
    assert weight_receive_bytes(exprs.matmul_bias_relu(4, 64, 64, "float16"), 16) == \
        pytest.approx(256)
    assert weight_receive_bytes(exprs.matmul(4, 64, 64, "float16", batch=2), 16) is None
    bound = execute_bound_seconds(e, e.flops(), hw)
    assert bound == pytest.approx(peak_seconds(e.flops(), e, hw) + 256 / hw.link_bandwidth)
    # the operand held in blocks is the one that receives least: the weight, not x
    assert weight_receive_bytes(exprs.matmul(64, 64, 4, dtype="float16"), 16) == \
        pytest.approx(256)
