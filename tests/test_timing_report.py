"""runtime_sim.timing.report: the resource floors, defined once and reported with every run."""

from __future__ import annotations

import math

import pytest

import tvm_icca
from runtime_sim.contract.metrics import METRICS
from runtime_sim.contract.presets import small_chip
from runtime_sim.timing.floors import FLOOR_KEYS, RunTraffic, resource_floors


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
