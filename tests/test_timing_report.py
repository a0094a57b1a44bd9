"""runtime_sim.timing.report: the resource floors, defined once and reported with every run."""

from __future__ import annotations

import math

import pytest

import tvm_icca
from runtime_sim.contract.hardware import small_chip
from runtime_sim.timing.report import resource_floors


@pytest.mark.parametrize("design", ["static", "elk-full", "ideal"])
def test_floors_bound_every_run(design):
    hw = small_chip(16, hbm_bandwidth=1e10, hbm_controllers=2)
    workload = tvm_icca.get_workload("llama2-7b", tiny=True, context=64, num_layers=1)
    report = tvm_icca.compile_programs(workload, hw, preload=design, progress=False,
                                       jobs=1).simulate(progress=False)
    data = report.to_dict(per_op=False)
    assert data["hbm_floor_s"] == pytest.approx(report.hbm_bytes / hw.hbm_bandwidth)
    assert data["compute_floor_s"] == pytest.approx(report.flops / hw.peak_matrix_flops)
    # link_bytes is what link_bandwidth_utilization counts: every core's receive port
    assert data["link_bytes"] == pytest.approx(report.link_bandwidth_utilization * report.total_s
                                               * hw.num_cores * hw.link_bandwidth)
    assert data["interconnect_floor_s"] == pytest.approx(
        report.link_bytes / (hw.num_cores * hw.link_bandwidth))
    # preload deliveries are link bytes: at least the HBM bytes reach some core
    assert report.link_bytes >= report.hbm_bytes > 0
    for name in ("hbm_floor_s", "compute_floor_s", "interconnect_floor_s"):
        assert 0 < data[name] <= report.total_s * (1 + 1e-9), name


def test_resource_floors_without_hbm():
    hw = small_chip(16)
    floors = resource_floors(hw, hbm_bytes=0.0, flops=2e9, link_bytes=16 * 5.5e9)
    assert floors == {"hbm_floor_s": 0.0, "compute_floor_s": 2e9 / hw.peak_matrix_flops,
                      "interconnect_floor_s": 1.0}
    assert all(math.isfinite(v) for v in floors.values())
