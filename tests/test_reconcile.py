"""Inter-operator memory reconciliation, T10 Algorithm 1 (tvm_icca.plan_search.reconcile)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from runtime_sim.contract.presets import small_chip
from tvm_icca.plan_search.pareto import pareto_plans
from tvm_icca.plan_search.reconcile import (
    OpOptions,
    PlanOption,
    evaluate,
    options_from_plans,
    reconcile,
    reconcile_exhaustive,
    transfer_setup,
)


def _per_byte_setup(cost: dict[int, float]):
    """Setup of op ``o`` costs ``cost[o]`` seconds per byte its weights grow by."""

    def setup(idle: PlanOption, active: PlanOption) -> float:
        return cost[idle.label[0]] * max(0, active.resident[0] - idle.resident[0])

    return setup


def _two_plan_ops(rng, n: int):
    """Every op: a small plan (slow) and a pre-set-up plan (fast), equal idle growth.

    Switching op ``o`` from small to fast costs ``c_o``; running it small instead costs
    ``lam * c_o`` more: choosing which ops to keep set up is then ranked the same way
    whatever memory remains, the case where the greedy policy is optimal.
    """
    base, delta, lam = 100, 200, float(rng.uniform(1.5, 4.0))
    ops, cost = [], {}
    for o in range(n):
        c = float(rng.uniform(0.1, 1.0))
        small = PlanOption(1.0 + lam * c, base, base, (base,), label=(o, 0))
        fast = PlanOption(1.0, base + delta, base + delta, (base + delta,), label=(o, 1))
        cost[o] = c / delta
        ops.append(OpOptions(f"op{o}", (small, fast)))
    return ops, _per_byte_setup(cost), base, delta


@pytest.mark.parametrize("seed", range(40))
def test_greedy_is_optimal_when_rankings_agree(seed) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 7))
    ops, setup, base, delta = _two_plan_ops(rng, n)
    capacity = int(n * base + rng.integers(0, (n + 2) * delta))
    greedy = reconcile(ops, capacity, setup)
    best = reconcile_exhaustive(ops, capacity, setup)
    assert greedy.total_time_s == pytest.approx(best.total_time_s, rel=1e-12)


def test_interior_optimum_under_memory_pressure() -> None:
    """More idle memory first removes setups, then squeezes the active plans out.

    Three ops; pre-setting one up saves its setup, but once idle memory passes 900 bytes
    the fast active plans (500 bytes) no longer fit and every op must run slowly. The best
    end-to-end time is in the middle of the search, and the trace shows it.
    """
    ops = []
    for o, c in enumerate((3.0, 2.0, 1.0)):
        small = PlanOption(10.0, 200, 200, (200,), label=(o, 0))
        fast = PlanOption(4.0, 500, 500, (500,), label=(o, 1))
        ops.append(OpOptions(f"op{o}", (small, fast)))
    setup = _per_byte_setup({0: 3.0 / 300, 1: 2.0 / 300, 2: 1.0 / 300})
    capacity = 1400
    greedy = reconcile(ops, capacity, setup)
    best = reconcile_exhaustive(ops, capacity, setup)
    assert greedy.total_time_s == pytest.approx(best.total_time_s)
    assert greedy.idle == {"op0": 1, "op1": 0, "op2": 0}  # the costliest setup is pre-paid
    assert greedy.setup_s["op0"] == 0.0
    times = [t for _, t in greedy.trace]
    assert greedy.total_time_s == min(times) and times[-1] > min(times)
    assert greedy.trace[0][0] == 600  # Algorithm 1 starts from the min-memory idle plans


def test_result_is_consistent() -> None:
    rng = np.random.default_rng(11)
    for _ in range(30):
        ops, cost = [], {}
        for o in range(int(rng.integers(2, 5))):
            sizes = np.sort(rng.integers(50, 400, size=int(rng.integers(2, 5))))
            times = np.sort(rng.uniform(1, 10, size=len(sizes)))[::-1]
            opts = tuple(PlanOption(float(t), int(s) + 40, int(s), (int(s),), label=(o, k))
                         for k, (s, t) in enumerate(zip(sizes, times)))
            cost[o] = float(rng.uniform(0.001, 0.05))
            ops.append(OpOptions(f"op{o}", opts))
        setup = _per_byte_setup(cost)
        capacity = int(sum(op.options[0].idle_bytes for op in ops) + rng.integers(40, 900))
        greedy = reconcile(ops, capacity, setup)
        best = reconcile_exhaustive(ops, capacity, setup)
        idle = [greedy.idle[op.name] for op in ops]
        total, active, _ = evaluate(ops, idle, capacity, setup)
        assert total == greedy.total_time_s and active == [greedy.active[op.name] for op in ops]
        assert greedy.idle_bytes <= capacity
        assert best.total_time_s <= greedy.total_time_s * (1 + 1e-12)
        assert len(greedy.trace) <= sum(len(op.options) for op in ops)


def test_transfer_setup_moves_only_what_is_missing() -> None:
    setup = transfer_setup(1e9)
    nested_idle = PlanOption(2.0, 300, 100, (100,), (((2, 2), (4, 1)),))
    nested_active = PlanOption(1.0, 600, 400, (400,), (((2, 2), (1, 1)),))
    other_grid = PlanOption(1.0, 600, 400, (400,), (((4, 1), (1, 1)),))
    assert setup(nested_idle, nested_idle) == 0.0
    assert setup(nested_idle, nested_active) == pytest.approx(300 / 1e9)
    assert setup(nested_idle, other_grid) == pytest.approx(400 / 1e9)


def test_reconcile_real_operators(exprs) -> None:
    """Pareto plans of four matmuls sharing one small chip; weights stay resident."""
    hw = small_chip(16, 24 * 1024)
    ops = []
    for i, (m, k, n) in enumerate([(16, 64, 48), (16, 48, 64), (16, 64, 32), (16, 32, 96)]):
        expr = exprs.matmul(m, k, n)
        ops.append(OpOptions(f"mm{i}", options_from_plans(expr, pareto_plans(expr, hw, filters=None), [1], hw.num_cores)))
    setup = transfer_setup(hw.link_bandwidth)
    for capacity in (5000, 8000, hw.usable_sram_bytes):
        greedy = reconcile(ops, capacity, setup)
        best = reconcile_exhaustive(ops, capacity, setup)
        assert math.isfinite(greedy.total_time_s)
        assert greedy.total_time_s == pytest.approx(best.total_time_s, rel=1e-12)
    roomy = reconcile(ops, hw.usable_sram_bytes, setup)
    assert all(s == 0.0 for s in roomy.setup_s.values())  # everything pre-set up
    assert reconcile(ops, 3000, setup).total_time_s == math.inf  # nothing fits


@pytest.mark.parametrize("seed", range(25))
def test_grouped_operators_and_per_operator_capacity_match_brute_force(seed) -> None:
    """``count`` instances share one decision and each holds its idle memory; ``capacity``
    caps one operator's active memory. The greedy result is feasible, evaluate() agrees
    with it, and exhaustive search over the same model is never worse."""
    rng = np.random.default_rng(100 + seed)
    ops, cost = [], {}
    for o in range(int(rng.integers(2, 4))):
        sizes = np.sort(rng.integers(20, 200, size=int(rng.integers(2, 4))))
        times = np.sort(rng.uniform(1, 10, size=len(sizes)))[::-1]
        opts = tuple(PlanOption(float(t), int(s) + int(rng.integers(0, 60)), int(s), (int(s),), label=(o, k))
                     for k, (s, t) in enumerate(zip(sizes, times)))
        cost[o] = float(rng.uniform(0.001, 0.05))
        count = int(rng.integers(1, 4))
        cap = None if rng.random() < 0.5 else int(rng.integers(300, 900))
        ops.append(OpOptions(f"op{o}", opts, count=count, capacity=cap))
    setup = _per_byte_setup(cost)
    floor = sum(op.count * min(o.idle_bytes for o in op.options) for op in ops)
    capacity = int(floor + rng.integers(50, 900))
    greedy = reconcile(ops, capacity, setup)
    best = reconcile_exhaustive(ops, capacity, setup)
    assert best.total_time_s <= greedy.total_time_s * (1 + 1e-12)
    if not math.isfinite(greedy.total_time_s):
        assert not math.isfinite(best.total_time_s) or greedy.trace
        return
    idle_memory = sum(op.count * op.options[greedy.idle[op.name]].idle_bytes for op in ops)
    assert idle_memory == greedy.idle_bytes <= capacity
    expected = 0.0
    for op in ops:
        i, j = greedy.idle[op.name], greedy.active[op.name]
        extra = op.options[j].active_bytes - (op.options[j].idle_bytes if i == j else 0)
        assert idle_memory + extra <= min(capacity, op.capacity or capacity)
        expected += op.count * (greedy.setup_s[op.name] + op.options[j].time_s)
    assert greedy.total_time_s == pytest.approx(expected, rel=1e-12)


def test_count_multiplies_idle_memory() -> None:
    """Three instances idling in place need three times the memory: only if it fits."""
    small = PlanOption(5.0, 100, 100, (100,), label=(0, 0))
    fast = PlanOption(1.0, 300, 300, (300,), label=(0, 1))
    setup = _per_byte_setup({0: 1.0 / 200})  # setting up 'fast' from 'small' costs 1 s
    one = reconcile([OpOptions("op", (small, fast), count=3)], 900, setup)
    assert one.idle["op"] == 1 and one.setup_s["op"] == 0.0 and one.total_time_s == pytest.approx(3.0)
    tight = reconcile([OpOptions("op", (small, fast), count=3)], 899, setup)
    assert tight.idle["op"] == 0 and tight.total_time_s == pytest.approx(3 * 2.0)


def test_operator_options_include_fast_in_place_plans(exprs) -> None:
    """The candidates of a weighted matmul hold both frontiers: the fastest plan overall and,
    for every weight footprint, the fastest plan keeping the weights that small."""
    from tvm_icca.plan_search.reconcile import operator_options

    hw = small_chip(16, 24 * 1024)
    expr = exprs.matmul(16, 64, 48)
    from runtime_sim.contract.plan import IDLE_SPREAD, ExecutionPlan

    options = operator_options(expr, hw, [1], hw.usable_sram_bytes, filters=None, tolerance=0.0)
    *plans, spread = options
    assert all(isinstance(o.label.plan, ExecutionPlan) for o in plans)
    # the last option idles spread over all cores and can never run
    assert spread.label == IDLE_SPREAD and spread.idle_bytes == 64 * 48 * 4 // 16
    assert reconcile([OpOptions("mm", (spread,))], hw.usable_sram_bytes,
                     transfer_setup(hw.link_bandwidth)).total_time_s == math.inf
    options = plans
    weight = [o.idle_bytes for o in options]
    # the minimum weight footprint is B spread over all 16 cores without replication
    assert min(weight) == 64 * 48 * 4 // 16
    fastest = min(options, key=lambda o: o.time_s)
    smallest_weight = min(o.idle_bytes for o in options)
    best_small = min((o for o in options if o.idle_bytes == smallest_weight), key=lambda o: o.time_s)
    assert fastest.time_s <= best_small.time_s
