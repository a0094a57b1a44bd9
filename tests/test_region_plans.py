"""The region planner's choices that are not the plan search's own
(tvm_icca.planning.region_plans): which regions price the arrival of produced inputs."""

from __future__ import annotations

from runtime_sim.contract.hardware import small_chip
from tvm_icca.lower.region import PendingOp, RegionOps
from tvm_icca.planning.region_plans import compute_bound
from tvm_icca.plans import plan_operator
from tvm_icca.testing import exprs

HBM_CHIP = small_chip(64, 256 * 1024).with_overrides(name="hbm-64", hbm_bandwidth=1e11,
                                                      hbm_controllers=2)


def _region(m: int, k: int, n: int) -> RegionOps:
    """One matmul of an activation ``[m, k]`` by a weight ``[k, n]`` read from HBM."""
    op = PendingOp("r.op0", exprs.matmul(m, k, n), ("x", "w"), "y")
    return RegionOps("r", (), (op,), ("y",), {})


def test_a_region_prices_arrivals_only_when_its_compute_outlasts_its_hbm_reads():
    # one token against a weight: reading the weight dominates (a decode step)
    assert not compute_bound(_region(1, 512, 512), HBM_CHIP, frozenset({"w"}))
    # a long prompt against the same weight: the compute dominates (a prefill)
    assert compute_bound(_region(8192, 512, 512), HBM_CHIP, frozenset({"w"}))
    # nothing read from HBM: compute-bound; a chip without HBM keeps the operators' own times
    assert compute_bound(_region(1, 512, 512), HBM_CHIP, frozenset())
    assert not compute_bound(_region(8192, 512, 512), small_chip(64, 256 * 1024), frozenset())


def test_a_priced_arrival_steers_the_plan_away_from_replicating_its_inputs():
    """Without the arrival, a plan that replicates an input is as cheap as its steps; with
    it, the search takes the plan whose steps plus arrival are least, holding less of the
    arriving inputs per core."""
    expr = exprs.matmul(64, 512, 512)
    free = plan_operator(expr, HBM_CHIP)
    priced = plan_operator(expr, HBM_CHIP, arriving=(0, 1))

    def arrival(planned) -> float:
        return sum(planned.layout.partition_bytes(t) for t in (0, 1)) / HBM_CHIP.link_bandwidth

    assert priced.plan != free.plan
    assert priced.time_s >= free.time_s  # its own steps are no faster...
    assert priced.time_s + arrival(priced) < free.time_s + arrival(free)  # ...its total is
    assert arrival(priced) < arrival(free)
