"""Departure pricing over a region (tvm_icca.model_pass.departures): producers planned again
with their readers' arrivals in view, kept only where the region gets faster."""

from __future__ import annotations

import pytest

from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import TensorDecl
from runtime_sim.timing import simulate_timing
from tvm_icca.lower.region import PendingOp, RegionOps
from tvm_icca.model_pass.departures import region_estimate, wanted_departures
from tvm_icca.model_pass.region_plans import compute_bound, plan_region, plan_region_departing
from tvm_icca.testing import exprs

HBM_CHIP = small_chip(16, 64 * 1024).with_overrides(name="hbm-16", hbm_bandwidth=1e11,
                                                     hbm_controllers=2)


def _bias_softmax(M: int, N: int) -> RegionOps:
    """A bias added to an activation read from HBM, then a softmax over its rows."""
    ops = (PendingOp("r.op0", exprs.bias_add(M, N), ("x", "b"), "y"),
           PendingOp("r.op1", exprs.softmax(M, N), ("y",), "z"))
    inputs = (TensorDecl("x", (M, N), "float32", "hbm"), TensorDecl("b", (1, N), "float32", "hbm"))
    return RegionOps("r", inputs, ops, ("z",), {})


def test_a_producer_leaves_its_output_where_its_reader_finds_it_and_the_region_runs_faster():
    region, hbm = _bias_softmax(256, 256), frozenset({"x", "b"})
    assert compute_bound(region, HBM_CHIP, hbm)
    first, _ = plan_region(region, HBM_CHIP, hbm_names=hbm)
    # planned alone, the bias splits the columns (a tie for it); the softmax reads rows and
    # pays their re-layout
    assert "r.op0" in wanted_departures(region, first, HBM_CHIP, hbm)
    departed, _ = plan_region_departing(region, HBM_CHIP, hbm_names=hbm)
    assert departed[0].plan.op_partition != first[0].plan.op_partition
    assert departed[1].plan == first[1].plan  # the reader keeps its plan, now in place
    assert not wanted_departures(region, departed, HBM_CHIP, hbm)
    assert (region_estimate(region, departed, HBM_CHIP, hbm)
            < region_estimate(region, first, HBM_CHIP, hbm))
    # the timing simulator agrees: the reader's re-layout is gone, the region is faster
    before = simulate_timing(region.program(HBM_CHIP, first), HBM_CHIP)
    after = simulate_timing(region.program(HBM_CHIP, departed), HBM_CHIP)
    assert before.per_op[1].relayout_s > 0
    assert after.per_op[1].relayout_s == 0
    assert after.total_s < before.total_s
    assert after.per_op[0].duration_s == pytest.approx(before.per_op[0].duration_s, rel=0.05)


def test_an_hbm_bound_region_keeps_its_plans():
    """A decode-like step (one token against a weight read from HBM): arrivals are hidden
    under the loads, so neither arrival nor departure is priced and nothing is planned
    again."""
    ops = (PendingOp("r.op0", exprs.matmul(1, 256, 256), ("x", "w"), "y"),
           PendingOp("r.op1", exprs.softmax(1, 256), ("y",), "z"))
    region = RegionOps("r", (), ops, ("z",), {})
    hbm = frozenset({"w"})
    assert not compute_bound(region, HBM_CHIP, hbm)
    first, budgets = plan_region(region, HBM_CHIP, hbm_names=hbm)
    departed, departed_budgets = plan_region_departing(region, HBM_CHIP, hbm_names=hbm)
    assert [op.plan for op in departed] == [op.plan for op in first]
    assert departed_budgets == budgets


def test_a_trial_that_does_not_pay_is_not_kept():
    """A matmul whose aligned plan does not fit keeps its first plan, and the reader its
    arrival: the region is planned as without departure pricing."""
    ops = (PendingOp("r.op0", exprs.matmul(64, 64, 256), ("x", "w"), "y"),
           PendingOp("r.op1", exprs.softmax(64, 256), ("y",), "z"))
    region = RegionOps("r", (), ops, ("z",), {})
    first, _ = plan_region(region, HBM_CHIP)
    departed, _ = plan_region_departing(region, HBM_CHIP)
    assert [op.plan for op in departed] == [op.plan for op in first]
