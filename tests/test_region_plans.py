"""The region planner's choices that are not the plan search's own
(tvm_icca.model_pass.region_plans): which regions price the arrival of produced inputs."""

from __future__ import annotations

from runtime_sim.contract.presets import small_chip
from tvm_icca.lower.region import PendingOp, RegionOps
from tvm_icca.model_pass.region_plans import compute_bound
from tvm_icca.plan_search import plan_operator
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


def test_only_outputs_held_beside_later_operators_are_capped_to_their_spread():
    """``held_output_caps``: an output read only by the next operator is not capped; one a
    later operator reads (or the region keeps) may take HELD_SPREAD times its even spread."""
    from tvm_icca.model_pass.region_plans import HELD_SPREAD, held_output_caps

    ops = (PendingOp("r.op0", exprs.matmul(64, 32, 32), ("x", "w0"), "a"),
           PendingOp("r.op1", exprs.matmul(64, 32, 32), ("a", "w1"), "b"),
           PendingOp("r.op2", exprs.matmul(64, 32, 32), ("b", "w2"), "c"),
           PendingOp("r.op3", exprs.bias_add(64, 32), ("a", "c"), "d"))
    region = RegionOps("r", (), ops, ("d",), {})
    caps = held_output_caps(region, HBM_CHIP)
    spread = -(-64 * 32 * 4 // HBM_CHIP.num_cores)
    # a: read again by op3 (held beside op1 and op2); b, c: read by the next operator only;
    # d: the region keeps it, but no operator runs after it
    assert caps == {"r.op0": HELD_SPREAD * spread}
    kept = RegionOps("r", (), ops, ("b", "d"), {})
    assert held_output_caps(kept, HBM_CHIP) == {"r.op0": HELD_SPREAD * spread,
                                                "r.op1": HELD_SPREAD * spread}
