"""Per-operator time/memory Pareto frontiers (tvm_icca.plan_search.pareto, T10 §4.3.1, Fig. 16-17)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import preset, small_chip
from tvm_icca.plan_search import AnalyticCostModel, plan_operator
from tvm_icca.plan_search.filters import PlanFilters
from tvm_icca.plan_search.pareto import pareto_front, pareto_plans, space_sizes
from tvm_icca.plan_search.plan_space import op_partitions, plans_for
from tvm_icca.plan_search.search_memo import plan_structure


def _brute_front(points: list[tuple[float, float]]) -> set[tuple[float, float]]:
    """Points no other point weakly dominates with a strict improvement somewhere."""
    keep = set()
    for m, t in points:
        if not any((m2 <= m and t2 <= t) and (m2 < m or t2 < t) for m2, t2 in points):
            keep.add((m, t))
    return keep


def test_pareto_front_of_points() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        memory = rng.integers(0, 12, size=40)
        time = rng.integers(0, 12, size=40).astype(float)
        idx = pareto_front(time, memory)
        got = [(int(memory[i]), float(time[i])) for i in idx]
        assert set(got) == _brute_front(list(zip(memory.tolist(), time.tolist())))
        assert len(got) == len(set(got))  # one plan per point
        assert [m for m, _ in got] == sorted(m for m, _ in got)


@pytest.mark.parametrize("build,cores", [
    (lambda e: e.matmul(12, 16, 10), 8),
    (lambda e: e.conv2d(1, 2, 6, 6, 3, 3, 3, pad=1), 8),
    (lambda e: e.matmul(4, 6, 8, batch=2), 8),
])
def test_complete_frontier_matches_brute_force(exprs, build, cores) -> None:
    """With no search constraint the frontier is the Pareto set of every plan and order."""
    expr = build(exprs)
    hw = small_chip(cores, 1024 * 1024)
    model = AnalyticCostModel()
    structure = plan_structure(expr)
    batch = plans_for(structure, op_partitions(structure, cores))
    points = []
    for i in range(len(batch)):
        plan = batch.plan(i)
        layout = OpLayout(expr, plan)
        best = min(model(OpLayout(expr, ExecutionPlan(plan.op_partition, plan.temporal, order)), hw).time_s
                   for order in itertools.permutations(plan.loop_order))
        points.append((layout.memory_bytes_per_core(), best))
    expected = _brute_front(points)
    front = pareto_plans(expr, hw, filters=None)
    got = {(p.memory_bytes, p.time_s) for p in front}
    assert len(got) == len(expected)
    for (m, t), (m2, t2) in zip(sorted(got), sorted(expected)):
        assert m == m2 and t == pytest.approx(t2, rel=1e-12)
    for p in front:  # each frontier plan is a real, valid plan with that cost
        layout = OpLayout(expr, p.plan)
        layout.validate()
        assert layout.memory_bytes_per_core() == p.memory_bytes
        assert model(layout, hw).time_s == pytest.approx(p.time_s, rel=1e-12)

    # The exact search under any budget lands on the frontier.
    for p in front:
        planned = plan_operator(expr, hw, budget_bytes=p.memory_bytes)
        assert planned.time_s == pytest.approx(p.time_s, rel=1e-12)


def test_filtered_frontier_obeys_the_constraints(exprs) -> None:
    hw = preset("ipu-mk2")
    expr = exprs.matmul(256, 1024, 512, "float16")
    filters = PlanFilters.t10()
    front = pareto_plans(expr, hw, filters=filters)
    assert 1 < len(front) < 50
    most = 1472  # 256 * 1024 * 512 leaves room for every core
    for p in front:
        layout = OpLayout(expr, p.plan)
        assert layout.num_cores >= math.ceil(0.9 * most)
        padded = math.prod(layout.F[a] * layout.xp[a] for a in layout.axes)
        assert padded / math.prod(layout.extent.values()) <= 1 / 0.9 + 1e-9
        assert p.memory_bytes <= hw.usable_sram_bytes
    times = [p.time_s for p in front]
    assert times == sorted(times, reverse=True)
    # The fastest filtered plan can be no faster than the exact optimum over everything.
    assert plan_operator(expr, hw).time_s <= front[-1].time_s * (1 + 1e-12)


def _padding_bound_front(expr, hw, budget: int) -> set[tuple[int, float]]:
    """By brute force: the (bytes, time) frontier of every plan of every F_op row (any number
    of cores) within T10's padding bound and ``budget``, under the analytic model."""
    from tvm_icca.plan_search.batch_cost import AnalyticBatchModel

    structure = plan_structure(expr)
    batch = plans_for(structure, op_partitions(structure, hw.num_cores))
    keep = np.flatnonzero((batch.padding() <= 1 / 0.9 + 1e-9) & (batch.memory() <= budget))
    batch = batch.take(keep)
    times, _ = AnalyticBatchModel(hw).times(batch)
    memory = batch.memory()
    return {(int(memory[i]), round(float(times[i]), 18)) for i in pareto_front(times, memory)}


def test_constraints_nothing_can_meet_drop_the_parallelism_one_first(exprs) -> None:
    """No plan meets both T10 constraints: the frontier is the exact one within the padding
    bound on any number of cores (brute force); below every such plan's footprint, the
    complete space's."""
    expr = exprs.matmul(7, 7, 7)  # 15+ of 16 cores only with > 11% padding
    hw = small_chip(16, 64 * 1024)
    assert pareto_plans(expr, hw, relax=False) == []
    relaxed = pareto_plans(expr, hw)
    loose = PlanFilters.t10().without_parallelism()
    assert relaxed == pareto_plans(expr, hw, filters=loose, relax=False)
    assert {(p.memory_bytes, round(p.time_s, 18)) for p in relaxed} == _padding_bound_front(
        expr, hw, hw.usable_sram_bytes)
    assert {p.cores for p in relaxed} <= {1, 7}  # 7 divides; any other split pads
    # The complete space holds smaller plans (16 cores, padded); a budget only they fit
    # leaves the padding bound too.
    complete = pareto_plans(expr, hw, filters=None)
    smallest = min(p.memory_bytes for p in relaxed)
    assert min(p.memory_bytes for p in complete) < smallest
    tight = smallest - 1
    assert _padding_bound_front(expr, hw, tight) == set()
    assert pareto_plans(expr, hw, budget_bytes=tight) == pareto_plans(
        expr, hw, filters=None, budget_bytes=tight) != []


def test_space_sizes_shrink_stage_by_stage(exprs) -> None:
    """Complete >> filtered >> Pareto, as in T10 Fig. 17."""
    sizes = space_sizes(exprs.matmul(256, 512, 768, "float16"), small_chip(256, 128 * 1024))
    assert sizes.complete > sizes.complete_plans > sizes.filtered > sizes.pareto > 1
    assert sizes.pareto < 50


def test_weight_frontier_and_joint_scan_match_brute_force(exprs) -> None:
    """The time vs weight-bytes frontier (T10 §4.3.2's idle side) equals the frontier of every
    plan fitting the budget, and one joint scan returns both frontiers unchanged."""
    from tvm_icca.plan_search.batch_cost import AnalyticBatchModel
    from tvm_icca.plan_search.pareto import pareto_plan_sets

    hw = small_chip(8, 1024 * 1024)
    expr = exprs.matmul(12, 16, 10)
    structure = plan_structure(expr)
    batch = plans_for(structure, op_partitions(structure, 8))
    times, _ = AnalyticBatchModel(hw).times(batch)
    budget = int(np.quantile(batch.memory(), 0.5))
    fits = np.flatnonzero(batch.memory() <= budget)
    weight = batch.partition_bytes()[fits, 1]
    expected = sorted({(int(weight[i]), round(float(times[fits][i]), 18))
                       for i in pareto_front(times[fits], weight)})
    got = pareto_plans(expr, hw, filters=None, budget_bytes=budget, tensors=(1,))
    assert sorted((OpLayout(expr, p.plan).partition_bytes(1), round(p.time_s, 18)) for p in got) == expected
    assert all(p.memory_bytes <= budget for p in got)
    joint = pareto_plan_sets(expr, hw, [None, (1,)], filters=None, budget_bytes=budget)
    alone = [pareto_plans(expr, hw, filters=None, budget_bytes=budget),
             pareto_plans(expr, hw, filters=None, budget_bytes=budget, tensors=(1,))]
    for a, b in zip(joint, alone):
        assert [(p.time_s, p.memory_bytes) for p in a] == [(p.time_s, p.memory_bytes) for p in b]


def test_an_expression_without_axes_has_its_one_plan() -> None:
    """A 0-d elementwise op (Clip's bounds, a quantization scale) has one plan: one core, no
    partition (the search's step caps used to stack an empty list of axes)."""
    from runtime_sim.contract.expr import TensorAccess, TensorExpr, make_load

    scalars = [TensorAccess(name, (), "float32", ()) for name in "ABC"]
    body = {"op": "add", "args": [make_load(0, ()), make_load(1, ())]}
    expr = TensorExpr("add", (), tuple(scalars[:2]), scalars[2], body)
    (only,) = pareto_plans(expr, small_chip(16, 16 * 1024))
    assert only.cores == 1 and only.plan.op_partition == {}
    assert only.memory_bytes == 3 * 4  # two inputs and the result, float32
