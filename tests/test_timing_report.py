"""runtime_sim.timing.timing_report: the resource floors, defined once and reported with every run."""

from __future__ import annotations

import json
import math

import pytest

import tvm_icca
from runtime_sim.contract.metrics import METRICS
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram
from runtime_sim.timing import simulate_timing
from runtime_sim.timing.floors import FLOOR_KEYS, RunTraffic, resource_floors
from tvm_icca.testing.timing_programs import chain_program, one_op_program

LAT = 1e-7  # link latency used where the closed forms should show it
HW16 = small_chip(16, link_latency_s=LAT)


@pytest.mark.parametrize("design", ["static", "elk-full", "ideal"])
def test_floors_bound_every_run(design):
    hw = small_chip(16, hbm_bandwidth=1e10, hbm_controllers=2)
    workload = tvm_icca.get_workload("llama2-7b", tiny=True, context=64, num_layers=1)
    report = tvm_icca.compile_programs(workload, hw, preload=design, progress=False,
                                       jobs=1).simulate(progress=False)
    data = report.to_dict(per_op=False)
    assert data["hbm_floor_s"] == pytest.approx(report.hbm_bytes / hw.hbm_bandwidth)
    assert data["compute_floor_s"] == pytest.approx(report.flops / hw.peak_matrix_flops)
    assert data["compute_units_floor_s"] >= data["compute_floor_s"]
    assert data["host_floor_s"] == pytest.approx(
        (report.host_in_bytes + report.host_out_bytes) / hw.host_bandwidth)
    # link_bytes is what link_bandwidth_utilization counts: every core's receive port (the
    # ideal design: two interconnects, its distributions in no time)
    counted = report.link_bytes - (report.distributed_bytes if design == "ideal" else 0.0)
    networks = 2 if design == "ideal" else 1
    assert counted == pytest.approx(report.link_bandwidth_utilization * report.total_s
                                    * hw.num_cores * hw.link_bandwidth * networks)
    if design != "ideal":
        assert data["interconnect_floor_s"] == pytest.approx(
            report.link_bytes / (hw.num_cores * hw.link_bandwidth))
    # preload deliveries are link bytes: at least the HBM bytes reach some core
    assert report.link_bytes >= report.hbm_bytes > 0
    for name in FLOOR_KEYS:
        assert 0 <= data[name] <= report.total_s * (1 + 1e-9), name
        assert name in METRICS
    assert data["floor_s"] == max(data[k] for k in FLOOR_KEYS) > 0
    assert data["run_bound_by"] in report.table()


def test_resource_floors_without_hbm():
    hw = small_chip(16)
    floors = resource_floors(hw, RunTraffic(flops=2e9, unit_s=1e-3, exec_link_bytes=16 * 5.5e9))
    assert floors == {**dict.fromkeys(FLOOR_KEYS, 0.0), "compute_floor_s": 2e9 / hw.peak_matrix_flops,
                      "compute_units_floor_s": 1e-3, "interconnect_floor_s": 1.0}
    assert all(math.isfinite(v) for v in floors.values())


def test_report_totals_dict_and_table() -> None:
    prog = chain_program(HW16)
    r = simulate_timing([prog, DeviceProgram.from_dict(
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


def test_operators_far_from_their_lower_bound_are_named(exprs) -> None:
    """A matmul planned onto one core of sixteen is ~16x its FLOP bound: flagged by name and
    kind; the 16-core plan of the same matmul is not."""
    hw = small_chip(16, 1024 * 1024, link_latency_s=LAT)
    e = exprs.matmul(64, 64, 64)
    bad = simulate_timing([one_op_program(e, ExecutionPlan({}, ({}, {}, {})), hw, constants=("A", "B"))])
    op = bad.per_op[0]
    peak = hw.num_cores * hw.matrix_flops_per_cycle * hw.clock_hz
    assert op.bound_by == "flops" and op.lower_bound_s == pytest.approx(2 * 64**3 / peak)
    ratio = (op.wait_s + op.duration_s) / op.lower_bound_s
    assert ratio > 10
    assert [r["kind"] for r in bad.slow_kinds] == ["matmul"]
    assert bad.slow_ops[0]["name"] == "op0" and bad.slow_ops[0]["ratio"] == pytest.approx(ratio)
    assert "more than 10x" in bad.table() and "matmul" in bad.table()
    assert bad.to_dict(per_op=False)["slow_kinds"][0]["kind"] == "matmul"
    good = simulate_timing([one_op_program(e, ExecutionPlan({"m": 4, "n": 4}, ({}, {}, {})), hw,
                                   constants=("A", "B"))])
    assert good.slow_kinds == [] and good.slow_ops == []
    assert good.op_kinds[0]["ratio"] < 10
