"""Elk §4.3: the cost-aware window allocation is feasible and, where the greedy is provably
optimal, equal to exhaustive search."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from tvm_icca.elk.allocation import WindowShrinker, allocate_window
from tvm_icca.elk.overlap_model import exec_duration, window_bytes
from tvm_icca.elk.tradeoffs import ElkMachine, ExecPoint, OpTradeoffs, PreloadPoint


def _op(rng, n_exec, n_pre, step_bytes=None, convex=False, key="op"):
    def front(n, start):
        steps = [step_bytes or rng.randint(1, 400) for _ in range(n - 1)]
        incs = sorted(rng.uniform(0.01, 1.0) for _ in range(n - 1)) if convex else \
            [rng.uniform(0.01, 1.0) for _ in range(n - 1)]
        spaces, times = [start], [0.0]
        for s, t in zip(steps, incs):
            spaces.append(spaces[-1] - s)
            times.append(times[-1] + t)
        return spaces, times
    es, et = front(n_exec, 3000)
    t0 = rng.uniform(0.5, 2.0)
    execs = tuple(ExecPoint(t0 + t, s, rng.uniform(0, t0)) for s, t in zip(es, et))
    pre = []
    for e in execs:
        ps, pt = front(n_pre, min(e.space, 1500))
        pre.append(tuple(PreloadPoint(s, t, rng.uniform(0.5, 2), rng.uniform(0, 0.5)) for s, t in zip(ps, pt)))
    return OpTradeoffs(key, execs, tuple(pre), 1.0, rng.randint(0, 200))


def _members(rng, started: bool):
    """0-3 preloaded operators beside a window, at a random execute point and, if
    ``started``, a random current preload point (else their largest)."""
    members = [(m, rng.randrange(len(m.execs)), 0) for m in
               (_op(rng, 3, rng.randint(1, 4)) for _ in range(rng.randint(0, 3)))]
    if started:
        members = [(m, e, rng.randrange(len(m.preloads[e]))) for m, e, _ in members]
    return members


def _exhaustive(op, members, machine):
    best = None
    ranges = [range(len(op.execs))] + [range(c, len(m.preloads[e])) for m, e, c in members]
    for combo in itertools.product(*ranges):
        ep = op.execs[combo[0]]
        pts = [m.preloads[e][c] for (m, e, _), c in zip(members, combo[1:])]
        if window_bytes(ep.space, (p.space for p in pts), op.live_bytes) > machine.sram_bytes:
            continue
        added = sum(p.distribute_s - m.preloads[e][c0].distribute_s for (m, e, c0), p in zip(members, pts))
        t = exec_duration(ep, 0.0, pts, machine.separate_interconnect) + added
        best = t if best is None else min(best, t)
    return best


def test_feasible_whenever_the_smallest_points_fit():
    rng = random.Random(1)
    for _ in range(400):
        op = _op(rng, rng.randint(1, 5), 3)
        members = _members(rng, started=True)
        machine = ElkMachine(rng.randint(500, 8000), rng.random() < 0.5)
        plan = allocate_window(op, members, machine)
        smallest = window_bytes(op.execs[-1].space, (m.preloads[e][-1].space for m, e, _ in members),
                                op.live_bytes)
        assert (plan is None) == (smallest > machine.sram_bytes)
        if plan is not None:
            pts = [m.preloads[e][c] for (m, e, _), c in zip(members, plan.preload_choices)]
            assert plan.space == window_bytes(op.execs[plan.exec_choice].space, (p.space for p in pts),
                                              op.live_bytes) <= machine.sram_bytes
            # a preloaded op's point only shrinks
            assert all(c >= c0 for (_, _, c0), c in zip(members, plan.preload_choices))
            best = _exhaustive(op, members, machine)
            assert plan.time_s >= best - 1e-12


def test_single_op_window_is_optimal():
    rng = random.Random(2)
    for _ in range(300):
        op = _op(rng, rng.randint(1, 6), 2)
        machine = ElkMachine(rng.randint(1000, 3500), rng.random() < 0.5)
        plan = allocate_window(op, [], machine)
        best = _exhaustive(op, [], machine)
        assert (plan is None) == (best is None)
        if plan is not None:
            assert plan.time_s == pytest.approx(best)


def test_matches_exhaustive_search_on_convex_equal_step_fronts():
    # Equal byte steps and convex time steps on a separate interconnect (separable cost): taking the
    # cheapest step each time is optimal, so the greedy must equal exhaustive search.
    rng = random.Random(3)
    for _ in range(300):
        op = _op(rng, rng.randint(1, 4), 2, step_bytes=100, convex=True)
        members = [(m, 0, 0) for m in (_op(rng, 2, rng.randint(1, 4), step_bytes=100, convex=True)
                                        for _ in range(rng.randint(0, 3)))]
        machine = ElkMachine(rng.randint(2500, 8000), separate_interconnect=True)
        plan = allocate_window(op, members, machine)
        best = _exhaustive(op, members, machine)
        assert (plan is None) == (best is None)
        if plan is not None:
            assert plan.time_s == pytest.approx(best)


def test_zero_cost_steps_first():
    # shrinking the member costs nothing, shrinking the executing op costs time: shrink the member
    ex = (ExecPoint(1.0, 1000, 0.0), ExecPoint(2.0, 500, 0.0))
    op = OpTradeoffs("a", ex, ((PreloadPoint(400, 0, 1, 0),), (PreloadPoint(400, 0, 1, 0),)), 1, 0)
    mem = OpTradeoffs("b", ex, ((PreloadPoint(800, 0, 1, 0), PreloadPoint(100, 0, 1, 0)),) * 2, 1, 0)
    plan = allocate_window(op, [(mem, 0, 0)], ElkMachine(1200))
    assert plan == allocate_window(op, [(mem, 0, 0)], ElkMachine(1200))
    assert plan.exec_choice == 0 and plan.preload_choices == (1,) and plan.time_s == 1.0


def test_one_trajectory_answers_every_amount_of_live_bytes():
    # identical LLM layers differ only in the live bytes beside their windows; a trajectory
    # resumed for a smaller budget, or asked again for a larger one, must give what the
    # greedy run afresh for that budget gives
    rng = random.Random(4)
    for _ in range(200):
        op = _op(rng, rng.randint(1, 5), 3)
        members = _members(rng, started=False)
        machine = ElkMachine(rng.randint(1500, 6000), rng.random() < 0.5)
        shared = WindowShrinker(op, members, machine)
        for live in [rng.randint(0, 3000) for _ in range(6)]:
            fresh = allocate_window(replace(op, live_bytes=live), members, machine)
            assert shared.plan(live) == fresh
