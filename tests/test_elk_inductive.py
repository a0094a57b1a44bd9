"""Elk §4.2 / Appendix A: the backward recurrence is exactly optimal on fixed tables."""

from __future__ import annotations

import itertools
import random

import pytest

from tvm_icca.elk.inductive import (
    InfeasibleError,
    backward_total,
    forward_times,
    inductive_schedule,
    min_horizons,
)


def _random_case(rng: random.Random, n: int, reorder: bool):
    loads = [rng.random() < 0.8 for _ in range(n)]
    order = [i for i in range(n) if loads[i]]
    if reorder and len(order) > 1:
        a = rng.randrange(len(order) - 1)
        order[a], order[a + 1] = order[a + 1], order[a]
    K = len(order)
    m = min_horizons(n, order)
    # L non-decreasing in the preload number; feasibility: p <= pmax (memory bound)
    table, pmax = [], []
    for i in range(n):
        span = K - m[i]
        steps = [rng.choice([0.0, rng.uniform(0, 2)]) for _ in range(span)]
        row = [rng.uniform(0.1, 3.0)]
        for s in steps:
            row.append(row[-1] + s)
        table.append(row)
        pmax.append(rng.randint(0, span) if rng.random() < 0.3 else span)
    d = [rng.uniform(0.0, 4.0) if loads[j] else 0.0 for j in range(n)]
    return order, m, table, pmax, d


def _brute_force(n, order, m, table, pmax, d):
    """Every preload-number vector, run with the device's forward semantics at effective p."""
    K = len(order)
    best = float("inf")
    for p in itertools.product(*[range(K - m[i] + 1) for i in range(n)]):
        hz, run = [], 0
        for i in range(n):
            run = max(run, m[i] + p[i])
            hz.append(run)
        eff = [hz[i] - m[i] for i in range(n)]
        if any(eff[i] > pmax[i] for i in range(n)):
            continue
        times = forward_times(n, order, hz, [table[i][eff[i]] for i in range(n)], d)
        best = min(best, times.total_s)
    return best


@pytest.mark.parametrize("reorder", [False, True])
def test_recurrence_is_exactly_optimal(reorder):
    rng = random.Random(7 + reorder)
    for _ in range(150):
        n = rng.randint(1, 6)
        order, m, table, pmax, d = _random_case(rng, n, reorder)
        def window(i, h):
            p = h - m[i]
            return table[i][p] if p <= pmax[i] else None
        try:
            res = inductive_schedule(n, order, window, lambda j: d[j])
        except InfeasibleError:
            pytest.fail("recurrence infeasible although p = 0 always fits here")
        brute = _brute_force(n, order, m, table, pmax, d)
        assert res.total_s == pytest.approx(brute, rel=1e-12, abs=1e-12)
        # the chosen schedule, run forward, takes exactly what the recurrence says
        ls = [table[i][res.horizon[i] - m[i]] for i in range(n)]
        assert forward_times(n, order, res.horizon, ls, d).total_s == pytest.approx(res.total_s)
        assert list(res.horizon) == sorted(res.horizon)


def test_forward_and_backward_agree_on_any_valid_schedule():
    rng = random.Random(3)
    for _ in range(300):
        n = rng.randint(1, 12)
        order = [i for i in range(n) if rng.random() < 0.7]
        for _ in range(2):
            if len(order) > 1:
                a = rng.randrange(len(order) - 1)
                order[a], order[a + 1] = order[a + 1], order[a]
        m = min_horizons(n, order)
        hz, prev = [], 0
        for i in range(n):
            prev = rng.randint(max(prev, m[i]), len(order)) if i < n - 1 else len(order)
            hz.append(prev)
        ex = [rng.uniform(0, 2) for _ in range(n)]
        pre = [rng.uniform(0, 2) for _ in range(n)]
        fwd = forward_times(n, order, hz, ex, pre)
        assert backward_total(n, order, hz, ex, pre) == pytest.approx(fwd.total_s)


def test_last_operator_has_preload_number_zero():
    # Lemma 4.1: nothing follows the last operator
    res = inductive_schedule(3, [0, 1, 2], lambda i, h: 1.0, lambda j: 1.0)
    assert res.horizon[-1] == 3


def test_infeasible_operator_is_reported():
    with pytest.raises(InfeasibleError):
        inductive_schedule(2, [0, 1], lambda i, h: None if i == 0 else 1.0, lambda j: 1.0)
