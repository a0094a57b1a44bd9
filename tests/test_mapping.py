"""tvm_icca.plan_search.mapping: what a placement sends across chips, as the timing simulator
sends it (the other mapping tests run through the search: tests/test_plan_search.py)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.timing import simulate_timing
from tvm_icca.plan_search.mapping import candidate_core_orders, mapping_cost
from tvm_icca.testing.timing_programs import one_op_program


def test_split_reduction_crosses_chips_once_per_chip(exprs) -> None:
    """16 replicas of a partial sum, 8 on each of two chips: the timing simulator sums each
    chip's replicas there and sends one partial sum between the chip leaders (the two-level
    schedule), which the mapping counts, not the 8 partitions of the replicas off the owner's
    chip."""
    base = small_chip(16)
    hw = small_chip(16, num_chips=2, inter_chip_bandwidth=2 * base.link_bandwidth,
                    link_latency_s=1e-7, inter_chip_latency_s=3e-8,
                    vector_flops_per_cycle=16 * base.vector_flops_per_cycle)
    e = exprs.matmul(64, 64, 64)
    plan = ExecutionPlan({"k": 16}, ({}, {}, {}))
    layout = OpLayout(e, plan, hw.cores_per_chip)
    pc = layout.partition_bytes(2)
    crossing = mapping_cost(layout, hw).inter_chip_bytes  # A and B held: only the sums cross
    assert crossing == pc
    report = simulate_timing([one_op_program(e, plan, hw, constants=("A", "B"))])
    assert report.inter_chip_bytes == pytest.approx(crossing, rel=1e-12)
    one_chip = small_chip(16)
    assert mapping_cost(OpLayout(e, plan), one_chip).inter_chip_bytes == 0.0


def test_outermost_split_axis_keeps_each_tensors_replicas_together(exprs) -> None:
    """With a producer, a split axis moved outermost (the chips split it) comes with the
    other axes in the expression's order and in each tensor's order: B's replicas (over m)
    contiguous within a chip, where a chunked preload multicasts its blocks."""
    e = exprs.matmul(8, 16, 8)
    layout = OpLayout(e, ExecutionPlan({"m": 2, "n": 2, "k": 4}, ({}, {}, {})))
    alone = candidate_core_orders(layout)
    fed = candidate_core_orders(layout, outermost=True)
    assert ("k", "m", "n") in fed and ("k", "n", "m") in fed
    assert ("k", "n", "m") not in alone and fed[:len(alone)] == alone
    assert len({tuple(a for a in o if layout.F[a] > 1) for o in fed}) == len(fed)  # no repeats
    assert np.all([sorted(o) == sorted(layout.axes) for o in fed if o])


@pytest.mark.parametrize("chips, wide", [(2, 2), (4, 4)])
def test_a_spread_reduction_is_timed_not_only_counted(exprs, chips, wide) -> None:
    """The choice of a placement charges a reduction spread over chips what it adds to
    summing on one chip: the faster of a one-level schedule held up by the fabric and the
    two-level one. On two chips that is the simulator's reduction exactly; on four, whose
    leaders' reduce-scatter shares the fabric, it stays below it and above one chip's."""
    from runtime_sim.machine.links import replica_reduction_seconds
    from tvm_icca.plan_search.mapping import reduction_spread, reduction_spread_seconds

    base = small_chip(16)
    hw = small_chip(16, num_chips=chips, inter_chip_bandwidth=wide * base.link_bandwidth,
                    link_latency_s=1e-7, inter_chip_latency_s=3e-8,
                    vector_flops_per_cycle=16 * base.vector_flops_per_cycle)
    e = exprs.matmul(64, 64, 64)
    plan = ExecutionPlan({"k": 16}, ({}, {}, {}))
    layout = OpLayout(e, plan, hw.cores_per_chip)
    spread = reduction_spread(layout, layout.chip_of_core(hw.cores_per_chip))
    pc = layout.partition_bytes(2)
    assert (spread.replicas, spread.per_chip, spread.leaders) == (16, 16 // chips, chips)
    assert spread.one_level_bytes == (16 - 16 // chips) * pc and spread.two_level_bytes == (chips - 1) * pc
    one_chip = float(replica_reduction_seconds(16, pc, pc // 4, hw))
    extra = reduction_spread_seconds(spread, hw)
    simulated = simulate_timing([one_op_program(e, plan, hw, constants=("A", "B"))]).per_op[0].reduction_s
    assert extra > 0 and one_chip + extra <= simulated * (1 + 1e-9)
    if chips == 2:
        assert one_chip + extra == pytest.approx(simulated, rel=1e-9)
    assert reduction_spread(OpLayout(e, plan), np.zeros(16, np.int64)) is None
    assert mapping_cost(layout, hw).inter_chip_s == pytest.approx(extra, rel=1e-12)


def test_relayout_counts_only_beyond_the_links_arrival(exprs) -> None:
    """The chip-aware choice adds a re-layout's fabric seconds only beyond the seconds the
    cores' links take to receive it (which the search's model already charges): the
    simulator's phase takes the slower of the two, not their sum."""
    from tvm_icca.plan_search.mapping import best_placement

    hw = small_chip(16, num_chips=2, inter_chip_bandwidth=2e9)
    plan = ExecutionPlan({"m": 16}, ({}, {}, {}))
    placements = [(plan, 0.0, 3e6, None, 1e6)]  # 1 MB of re-layout among 3 MB crossing
    rest = 2e6 / 2e9
    assert best_placement(plan, placements, hw)[2] == pytest.approx(rest + 1e6 / 2e9)
    assert best_placement(plan, placements, hw, arrival_s=2e-4)[2] == pytest.approx(rest + 3e-4)
    assert best_placement(plan, placements, hw, arrival_s=1e-3)[2] == pytest.approx(rest)
