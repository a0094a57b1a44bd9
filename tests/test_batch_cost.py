"""The rotation bound of the batch cost model (tvm_icca.plan_search.batch_cost.rotation_shift_bound)
and the covering problem under it (tvm_icca.plan_search.rotation_cover), against brute force.

References: every non-empty set of tensors enumerated with itertools (the integer optimum),
the linear relaxation's optimum from its basic solutions (at most one fractional tensor), a
greedy integer cover (a feasible set, so an upper bound), and the exact search itself, which
must find the same optimum whatever valid bound prunes it.
"""

from __future__ import annotations

import itertools
import math
import time
import tracemalloc

import numpy as np
import pytest

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.expr import Axis, TensorAccess, TensorExpr
from runtime_sim.contract.presets import small_chip
from tvm_icca.plan_search import plan_operator, rotation_cover
from tvm_icca.plan_search.batch_cost import rotation_shift_bound
from tvm_icca.plan_search.bounds import partition_lower_bounds, subtensor_lower_bounds
from tvm_icca.plan_search.plan_space import op_partitions, sharing_counts
from tvm_icca.plan_search.rotation_cover import least_rotation_bytes, rotation_bound_is_exact
from tvm_icca.plan_search.search_memo import plan_structure
from tvm_icca.testing.exprs import ax, load, op


# -- references --------------------------------------------------------------------------------
def _sets(T: int):
    return (S for k in range(1, T + 1) for S in itertools.combinations(range(T), k))


def _exact(whole, split, can, budget) -> np.ndarray:
    """The integer optimum: every non-empty set of rotatable tensors that fits, the cheapest."""
    out = np.full(len(whole), np.inf)
    for r in range(len(whole)):
        for S in _sets(whole.shape[1]):
            if not can[r, list(S)].all():
                continue
            if whole[r].sum() - sum(whole[r, t] - split[r, t] for t in S) <= budget:
                out[r] = min(out[r], sum(whole[r, t] for t in S))
    return out


def _fractional(whole, split, can, budget) -> np.ndarray:
    """The linear relaxation's optimum (``0 <= x_t <= 1``, ``x_t = 0`` where ``t`` cannot
    rotate) over its basic solutions: a whole set ``S`` plus at most one tensor ``j`` in part."""
    out = np.full(len(whole), np.inf)
    for r in range(len(whole)):
        need = whole[r].sum() - budget
        ts = [t for t in range(whole.shape[1]) if can[r, t]]
        for S in itertools.chain([()], itertools.chain.from_iterable(
                itertools.combinations(ts, k) for k in range(1, len(ts) + 1))):
            saved = sum(whole[r, t] - split[r, t] for t in S)
            cost = sum(whole[r, t] for t in S)
            if saved >= need:
                out[r] = min(out[r], cost)
                continue
            for j in ts:
                d = whole[r, j] - split[r, j]
                if j not in S and d > 0 and saved + d >= need:
                    out[r] = min(out[r], cost + (need - saved) / d * whole[r, j])
    return out


def _greedy_cover(whole, split, can, budget) -> np.ndarray:
    """A feasible set per row (tensors by cost per byte saved until the budget is met): its
    cost is at least the optimum."""
    out = np.full(len(whole), np.inf)
    for r in range(len(whole)):
        need = whole[r].sum() - budget
        saves = whole[r] - split[r]
        ts = sorted((t for t in range(whole.shape[1]) if can[r, t] and saves[t] > 0),
                    key=lambda t: whole[r, t] / saves[t])
        cost = saved = 0.0
        for t in ts:
            if saved >= need and cost > 0:
                break
            cost, saved = cost + whole[r, t], saved + saves[t]
        if saved >= need and ts:
            out[r] = cost
    return out


def _case(rng: np.random.Generator, T: int, rows: int = 12):
    """Byte counts whose sums are exact in float64 (integers and eighths), ties included: a
    budget equal to some set's footprint and one met without rotating."""
    whole = rng.integers(0, 2000, (rows, T)).astype(float)
    split = whole * rng.integers(1, 9, (rows, T)) / 8  # 0 < split <= whole
    can = rng.random((rows, T)) < 0.75
    member = rng.random(T) < 0.5
    budgets = [float(rng.integers(0, int(whole.sum(axis=1).max()) + 1)),
               float((whole - member * (whole - split)).sum(axis=1)[0]),
               float(whole.sum(axis=1).max()), math.inf]
    return whole, split, can, budgets


# -- the covering problem ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_few_tensors_are_enumerated_exactly(seed: int) -> None:
    rng = np.random.default_rng(seed)
    whole, split, can, budgets = _case(rng, T=1 + seed % 8)
    for budget in budgets:
        got = least_rotation_bytes(whole, split, can, budget)
        assert rotation_bound_is_exact(can, whole, budget).all()
        np.testing.assert_array_equal(got, _exact(whole, split, can, budget))


@pytest.mark.parametrize("seed", range(12))
def test_relaxation_is_dantzigs_bound_and_never_above_the_optimum(seed: int, monkeypatch) -> None:
    # no enumeration at all: every row that must save memory takes the relaxation
    monkeypatch.setattr(rotation_cover, "MAX_ENUMERATED_TENSORS", 0)
    rng = np.random.default_rng(100 + seed)
    whole, split, can, budgets = _case(rng, T=2 + seed % 7)
    for budget in budgets:
        got = least_rotation_bytes(whole, split, can, budget)
        exact = _exact(whole, split, can, budget)
        assert (got <= exact).all()
        claimed = rotation_bound_is_exact(can, whole, budget)
        np.testing.assert_array_equal(got[claimed], exact[claimed])
        # the fractional optimum, or a set's cheapest member where that is higher
        cheapest = np.where(can, whole, np.inf).min(axis=1)
        want = np.maximum(_fractional(whole, split, can, budget), cheapest)
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isfinite(got), finite)
        # below it by the slack at most: the need shrinks by RELAXATION_SLACK of the bytes,
        # and the relaxation's cost per byte saved is at most 8 here (split >= whole / 8)
        gap = want[finite] - got[finite]
        slack = 8.01 * rotation_cover.RELAXATION_SLACK * whole.sum(axis=1)[finite]
        assert (gap >= 0).all() and (gap <= slack).all()


def _exact_priced(whole, split, can, budget, cost) -> np.ndarray:
    """The integer optimum of ``sum cost_t`` over the sets :func:`_exact` enumerates."""
    out = np.full(len(whole), np.inf)
    for r in range(len(whole)):
        for S in _sets(whole.shape[1]):
            if can[r, list(S)].all() and whole[r].sum() - sum(whole[r, t] - split[r, t] for t in S) <= budget:
                out[r] = min(out[r], sum(cost[r, t] for t in S))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_other_prices_of_rotating_are_covered_exactly_or_below(seed: int, monkeypatch) -> None:
    """A price per rotating tensor other than its bytes (the search's shift latencies and
    arrivals): the enumeration finds the cheapest set by that price, the relaxation never
    exceeds it, and a negative price is refused (the greedy relaxation would overshoot)."""
    rng = np.random.default_rng(200 + seed)
    whole, split, can, budgets = _case(rng, T=2 + seed % 6)
    cost = rng.integers(0, 3000, whole.shape) / 4  # unrelated to the bytes, zero included
    for budget in budgets:
        want = _exact_priced(whole, split, can, budget, cost)
        np.testing.assert_array_equal(least_rotation_bytes(whole, split, can, budget, cost), want)
        with monkeypatch.context() as m:
            m.setattr(rotation_cover, "MAX_ENUMERATED_TENSORS", 0)
            relaxed = least_rotation_bytes(whole, split, can, budget, cost)
        assert (relaxed <= want).all()
        np.testing.assert_array_equal(np.isfinite(relaxed), np.isfinite(want))
    with pytest.raises(ValueError, match="negative"):
        least_rotation_bytes(whole, split, can, math.inf, cost - 1000)


def test_budget_met_without_rotating_costs_the_cheapest_rotatable_tensor() -> None:
    whole = np.array([[40.0, 10.0, 30.0], [5.0, 8.0, 1.0]])
    split = whole / 4
    can = np.array([[True, False, True], [False, False, False]])
    np.testing.assert_array_equal(least_rotation_bytes(whole, split, can, math.inf), [30.0, math.inf])


@pytest.mark.parametrize("T", [25, 64, 200])
def test_many_tensors_stay_polynomial(T: int) -> None:
    """The bound of hundreds of rows of many tensors takes milliseconds and little memory
    (the enumeration of every set needed 2^T columns per row: 13 GiB at T = 26), and stays
    between the cheapest member and a feasible cover."""
    rng = np.random.default_rng(T)
    rows = 400
    whole = rng.integers(1, 5000, (rows, T)).astype(float)
    split = whole / rng.choice([1, 2, 4, 8, 16], (rows, T))
    can = rng.random((rows, T)) < 0.8
    budget = float(np.median(whole.sum(axis=1))) * 0.6
    tracemalloc.start()
    start = time.perf_counter()
    got = least_rotation_bytes(whole, split, can, budget)
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 1.0 and peak < 32 * 2**20
    assert not rotation_bound_is_exact(can, whole, budget).all()
    upper = _greedy_cover(whole, split, can, budget)
    assert (got <= upper).all()
    assert (got >= np.where(can, whole, np.inf).min(axis=1)).all()
    assert np.isfinite(got).sum() > rows // 2  # most rows can meet the budget


# -- rotation_shift_bound on operators ---------------------------------------------------------
def _matmul_sum(n: int, size: int = 32, depth: int = 16) -> TensorExpr:
    """Y[i, j] = sum_d sum_k A_k[i, d] * B_k[j, d]: 2n inputs that each miss one output axis,
    so every one of them can rotate when that axis is split (a wide operator whose rows
    must rotate under a small budget)."""
    As = [TensorAccess(f"A{k}", (size, depth), "float32", (ax("i"), ax("d"))) for k in range(n)]
    Bs = [TensorAccess(f"B{k}", (size, depth), "float32", (ax("j"), ax("d"))) for k in range(n)]
    body = None
    for k in range(n):
        term = op("mul", load(k, As[k].indices), load(n + k, Bs[k].indices))
        body = term if body is None else op("add", body, term)
    Y = TensorAccess("Y", (size, size), "float32", (ax("i"), ax("j")))
    axes = (Axis("i", size), Axis("j", size), Axis("d", depth, True))
    return TensorExpr("reduce", axes, tuple(As + Bs), Y, body)


def _bound_by_enumeration(structure, F, seconds_per_byte, budget) -> np.ndarray:
    whole = subtensor_lower_bounds(structure, F)
    split = partition_lower_bounds(structure, F)
    can = (sharing_counts(structure, F) > 1) & structure.rotatable.any(axis=1)[None, :]
    return _exact(whole, split, can, budget) * seconds_per_byte


@pytest.mark.parametrize("make", ["matmul", "conv2d", "layer_norm", "matmul_bias_relu", "matmul_sum"])
def test_shift_bound_of_operators_equals_enumeration(make: str, exprs) -> None:
    expr = {"matmul": lambda: exprs.matmul(24, 32, 16),
            "conv2d": lambda: exprs.conv2d(1, 4, 8, 8, 8, 3, 3, pad=1),
            "layer_norm": lambda: exprs.layer_norm(16, 32),
            "matmul_bias_relu": lambda: exprs.matmul_bias_relu(16, 24, 32),
            "matmul_sum": lambda: _matmul_sum(3)}[make]()
    structure = plan_structure(expr)
    F = op_partitions(structure, 16)
    total = subtensor_lower_bounds(structure, F).sum(axis=1)
    spb = 1.0 / 5.5e9
    for budget in (math.inf, *np.quantile(total, [0.1, 0.5, 0.9])):
        np.testing.assert_array_equal(rotation_shift_bound(structure, F, spb, budget),
                                      _bound_by_enumeration(structure, F, spb, budget))


def test_wide_operator_bound_is_valid_and_small() -> None:
    """A 33-tensor operator whose rows must rotate to fit: the bound (relaxed) is below every
    rotating plan's shifts, computed without a table of subsets."""
    expr = _matmul_sum(16)
    structure = plan_structure(expr)
    F = op_partitions(structure, 16)
    whole = subtensor_lower_bounds(structure, F)
    budget = float(np.median(whole.sum(axis=1))) / 2
    tracemalloc.start()
    got = rotation_shift_bound(structure, F, 1.0, budget)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 32 * 2**20
    split = partition_lower_bounds(structure, F)
    can = (sharing_counts(structure, F) > 1) & structure.rotatable.any(axis=1)[None, :]
    assert can.sum(axis=1).max() > rotation_cover.MAX_ENUMERATED_TENSORS
    assert (got <= _greedy_cover(whole, split, can, budget)).all()
    assert np.isfinite(got).any() and (got[np.isfinite(got)] > 0).all()


@pytest.mark.parametrize("make", ["matmul", "conv2d",
                                  pytest.param("matmul_sum", marks=pytest.mark.long_run)])  # 8 s
def test_search_optimum_is_the_same_with_the_relaxed_bound(make: str, exprs, monkeypatch) -> None:
    """The search is exact for any valid bound: forcing the relaxation everywhere changes what
    it prunes, never the optimum it returns."""
    expr = {"matmul": lambda: exprs.matmul(64, 96, 64),
            "conv2d": lambda: exprs.conv2d(1, 8, 12, 12, 16, 3, 3, pad=1),
            "matmul_sum": lambda: _matmul_sum(2, 32)}[make]()
    hw = small_chip(16)
    structure = plan_structure(expr)
    least = int(np.ceil(subtensor_lower_bounds(structure, op_partitions(structure, 16))
                        .sum(axis=1).min()))
    for budget in (hw.usable_sram_bytes, least, 3 * least // 4, least // 2, 3 * least // 8):
        exact = _planned(expr, hw, budget)
        with monkeypatch.context() as m:
            m.setattr(rotation_cover, "MAX_ENUMERATED_TENSORS", 0)
            relaxed = _planned(expr, hw, budget)
        assert relaxed == exact


def _planned(expr: TensorExpr, hw, budget: int) -> tuple[float, int] | None:
    """(time, bytes per core) of the optimum within ``budget``, None when nothing fits."""
    try:
        planned = plan_operator(expr, hw, budget_bytes=budget)
    except PlanNotFoundError:
        return None
    return planned.time_s, planned.memory_bytes_per_core


# -- the rotating bound of the search's models -------------------------------------------------
def _arrival_case(name: str, exprs, hw):
    """(expression, arriving inputs, inputs found in place) of the rotating bound's cases."""
    from tvm_icca.plan_search.search import in_place_inputs

    if name == "matmul_in_place":  # a matmul reading another's output in its blocks
        producer = plan_operator(exprs.matmul(16, 8, 12), hw).layout
        found = in_place_inputs([(0, producer)], (0,), mapped=False)
        assert found
        return exprs.matmul(16, 12, 20), (0,), found
    expr, arriving = {"matmul": (exprs.matmul(24, 32, 16), (0,)),
                      "matmul_both": (exprs.matmul(24, 32, 16), (0, 1)),
                      "conv2d": (exprs.conv2d(1, 4, 8, 8, 8, 3, 3, pad=1), (0,)),
                      "conv2d_both": (exprs.conv2d(1, 4, 8, 8, 8, 3, 3, pad=1), (0, 1)),
                      "matmul_bias": (exprs.matmul_bias_relu(16, 24, 32), (0, 2))}[name]
    return expr, arriving, ()


@pytest.mark.parametrize("name", ["matmul", "matmul_both", "conv2d", "conv2d_both", "matmul_bias",
                                  "matmul_in_place"])
def test_rotating_bound_with_arrivals_never_exceeds_a_rotating_plan(name: str, exprs) -> None:
    """ArrivalCostModel.rotating_lower_bound (its arrivals and shifts bounded together, the
    shifts' latencies counted) is below the time of every rotating plan of its row that fits
    the budget, on every plan of a small chip (and the analytic model's own, latencies
    included, below its plans); it is stronger than the bound it replaced (the
    base model's shifts by their bytes alone plus the arrival of the smallest partitions) on
    some rows, the rows a search no longer expands; and the exact search still finds the
    brute-force optimum."""
    from tvm_icca.plan_search.batch_cost import AnalyticBatchModel, ArrivalCostModel
    from tvm_icca.plan_search.plan_space import plans_for
    from tvm_icca.plan_search.search import best_plan

    cores = 16
    hw = small_chip(cores)
    assert hw.link_latency_s > 0 and hw.shift_buffer_bytes > 0  # the latency term is exercised
    expr, arriving, in_place = _arrival_case(name, exprs, hw)
    structure = plan_structure(expr)
    model = ArrivalCostModel(AnalyticBatchModel(hw), arriving, hw, in_place=in_place)
    batch = plans_for(structure, op_partitions(structure, cores))
    times, _ = model.times(batch)
    own, _ = model.base.times(batch)  # the analytic model alone: its bound has the latencies too
    memory = batch.memory()
    rotating = (batch.ft > 1).any(axis=(1, 2))
    assert rotating.any()
    F, row = np.unique(batch.F, axis=0, return_inverse=True)
    row = row.reshape(-1)
    stronger = 0
    for budget in sorted({int(m) for m in np.quantile(memory[rotating], [0.05, 0.5, 1.0])}):
        bound = model.rotating_lower_bound(structure, F, budget)
        fits = rotating & (memory <= budget)
        least = np.full(len(F), np.inf)
        np.minimum.at(least, row[fits], times[fits])
        assert (bound <= least).all()
        least = np.full(len(F), np.inf)
        np.minimum.at(least, row[fits], own[fits])
        assert (model.base.rotating_lower_bound(structure, F, budget) <= least).all()
        stronger += int((bound > _old_rotating_bound(model, structure, F, budget) * (1 + 1e-9)).sum())
        if in_place:  # rows that may read the input in place do not pay for it arriving whole
            elsewhere = ArrivalCostModel(AnalyticBatchModel(hw), arriving, hw)
            assert (bound < elsewhere.rotating_lower_bound(structure, F, budget)).any()
        found = best_plan(structure, model, budget, cores)
        everything = memory <= budget
        assert float(found.time[0]) == pytest.approx(float(times[everything].min()), rel=1e-12)
    assert stronger > 0


def _old_rotating_bound(model, structure, F, budget) -> np.ndarray:
    """The bound ArrivalCostModel used before: the base model's shifts by their bytes alone,
    plus every arriving input's smallest partition."""
    base = model.base
    hw = base.hw
    shift = rotation_shift_bound(structure, F, 1.0 / hw.link_bandwidth, budget)
    return (base.time_lower_bound(structure, F) + hw.sync_cycles / hw.clock_hz + shift
            + model._arrival(partition_lower_bounds(structure, F), structure, F))
