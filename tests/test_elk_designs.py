"""Elk §6.1 designs: valid schedules, estimate == recurrence, and the designs' ordering."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from tvm_icca.elk.designs import (
    DESIGNS,
    STATIC_SPLITS,
    STATIC_STEP_BYTES,
    plan_preloads,
    static_reservations,
)
from tvm_icca.elk.draft import Draft, finish_draft
from tvm_icca.elk.inductive import InfeasibleError, backward_total, check_horizons, min_horizons
from tvm_icca.elk.inductive_draft import inductive_draft
from tvm_icca.elk.refine import refine
from tvm_icca.elk.elk_schedule import PlanStats, estimate
from tvm_icca.elk.synthetic import SRAM, synthetic_llm
from tvm_icca.elk.tradeoffs import ElkMachine, ExecPoint, OpTradeoffs, PreloadPoint


def _cases(n):
    rng = random.Random(11)
    for _ in range(n):
        ops = synthetic_llm(rng.randint(1, 2), seed=rng.randrange(1000), hbm_bw=rng.uniform(3e9, 60e9))
        machine = ElkMachine(int(SRAM * rng.uniform(0.8, 1.6)), rng.random() < 0.25)
        yield ops, machine


def _timeline_peak(ops, sched) -> int:
    """SRAM per core at every event of the estimated timeline, from the timeline alone: the
    executing op's space + live bytes, plus every preload that has started and whose op has not."""
    tl = sched.timeline
    events = sorted(set(tl.exec_start) | {t for t in tl.pre_start if not math.isnan(t)})
    peak = 0
    for t in events:
        used = 0
        for i, op in enumerate(ops):
            if tl.exec_start[i] <= t < tl.exec_end[i] or (tl.exec_start[i] == t == tl.exec_end[i]):
                used += op.execs[sched.exec_choice[i]].space + op.live_bytes
            elif op.loads and tl.pre_start[i] <= t < tl.exec_start[i]:
                if sched.design == "ideal":
                    continue        # ideal: preloads live in their own SRAM
                used += op.preloads[sched.exec_choice[i]][sched.preload_choice[i]].space
        peak = max(peak, used)
    return peak


def _stream_preload_peak(ops, sched) -> int:
    """The most preload space the written points hold at once in the stream's memory model (a
    preload held from its issue until its operator starts, as the device counts it:
    :func:`runtime_sim.contract.resting.stream_sram_peaks`), from the schedule alone."""
    space = {j: ops[j].preloads[sched.exec_choice[j]][sched.preload_choice[j]].space
             for j in sched.preload_order}
    return max((sum(space[j] for j in sched.preload_order[:h] if j >= i)
                for i, h in enumerate(sched.horizon)), default=0)


def test_designs_are_ordered_on_random_models():
    for ops, machine in _cases(7):
        totals = {d: plan_preloads(ops, machine, d).total_s for d in DESIGNS}
        eps = 1e-12
        assert totals["ideal"] <= totals["elk-full"] + eps
        assert totals["elk-full"] <= totals["elk-dyn"] + eps
        assert totals["elk-dyn"] <= totals["static"] + eps
        assert totals["static"] <= totals["basic"] + eps
        # no design beats the HBM floor of the shortest loads or the compute floor
        floor = max(sum(min(p.load_s for f in o.preloads for p in f) for o in ops if o.loads),
                    sum(o.execs[0].time_s for o in ops))
        assert totals["ideal"] >= floor * (1 - 1e-9)


@pytest.mark.parametrize("design", DESIGNS)
def test_schedules_are_valid_and_estimates_agree(design):
    for ops, machine in _cases(3):
        s = plan_preloads(ops, machine, design)
        n = len(ops)
        assert s.design == design
        assert sorted(s.preload_order) == [i for i, o in enumerate(ops) if o.loads]
        m = min_horizons(n, s.preload_order)
        assert all(h >= mi for h, mi in zip(s.horizon, m))
        assert list(s.horizon) == sorted(s.horizon)
        for i, o in enumerate(ops):
            assert 0 <= s.exec_choice[i] < len(o.execs)
            assert (s.preload_choice[i] >= 0) == o.loads
        tl = s.timeline
        assert estimate(ops, machine, s) == tl
        assert tl.total_s == s.total_s
        # the backward recurrence on the chosen schedule gives the forward estimate's total
        assert backward_total(n, s.preload_order, s.horizon, tl.exec_s, tl.preload_s) == \
            pytest.approx(s.total_s, rel=1e-12)
        # every op's preload ends before it executes; executions are sequential
        for i, o in enumerate(ops):
            if o.loads:
                assert tl.pre_end[i] <= tl.exec_start[i] + 1e-15
            if i:
                assert tl.exec_start[i] >= tl.exec_end[i - 1] - 1e-15
        assert max(tl.window_bytes) <= machine.sram_bytes
        assert _timeline_peak(ops, s) <= machine.sram_bytes
        if design == "ideal":
            assert _stream_preload_peak(ops, s) <= machine.preload_capacity


def test_design_specific_shapes():
    ops, machine = next(_cases(1))
    basic = plan_preloads(ops, machine, "basic")
    m = min_horizons(len(ops), basic.preload_order)
    assert all(h <= mi + 1 for h, mi in zip(basic.horizon, m))           # next op only
    ideal = plan_preloads(ops, machine, "ideal")
    assert all(c == len(o.preloads[e]) - 1 for o, e, c in
               zip(ops, ideal.exec_choice, ideal.preload_choice) if o.loads)  # MinPreload
    static = plan_preloads(ops, machine, "static")
    if static.stats.source.startswith("static"):
        ends = {c == 0 for o, c in zip(ops, static.preload_choice) if o.loads and len(o.preloads[0]) > 1}
        lasts = {c == len(o.preloads[e]) - 1 for o, e, c in
                 zip(ops, static.exec_choice, static.preload_choice) if o.loads}
        assert ends == {True} or lasts == {True}
    with pytest.raises(ValueError):
        plan_preloads(ops, machine, "fastest")


def test_model_that_cannot_fit_is_reported():
    big = OpTradeoffs("x", (ExecPoint(1.0, 2000, 0.0),), ((PreloadPoint(1000, 0, 1, 0),),), 1.0, 0)
    for design in DESIGNS:
        with pytest.raises(InfeasibleError):
            plan_preloads([big], ElkMachine(1500), design)


def test_fastest_preload_is_the_least_load_plus_distribution():
    from tvm_icca.elk.inductive_draft import fastest_preload

    front = (PreloadPoint(400, 0.0, 3e-6, 1e-6),      # MaxPreload: every chip reads it all
             PreloadPoint(200, 0.2e-6, 1.5e-6, 0.5e-6),
             PreloadPoint(100, 0.5e-6, 0.8e-6, 0.3e-6))  # MinPreload
    assert fastest_preload(front) == 2
    assert fastest_preload(front[:1]) == 0
    tie = (PreloadPoint(400, 0.0, 1e-6, 0.0), PreloadPoint(100, 0.5e-6, 0.5e-6, 0.0))
    assert fastest_preload(tie) == 0                   # ties keep the larger point


def test_elk_preloads_a_host_input_chunked_when_that_loads_faster():
    # op 0's MaxPreload reads 4x the bytes of its MinPreload (an input every chip needs, read
    # once per chip); op 1's MinPreload needs a long distribution. With plenty of SRAM the
    # fastest stream preloads op 0 small and op 1 large: 1 + (0.1 + 10) + 10 = 21.1, where
    # all-MaxPreload takes 4 + 10 + 10 and all-MinPreload 1 + 10.1 + (3 + 10) (Static's two)
    host = OpTradeoffs("host", (ExecPoint(10.0, 100, 0.0),),
                       ((PreloadPoint(400, 0.0, 4.0, 0.0), PreloadPoint(100, 0.1, 1.0, 0.0)),),
                       1.0, 0)
    shared = OpTradeoffs("shared", (ExecPoint(10.0, 100, 0.0),),
                         ((PreloadPoint(400, 0.0, 1.0, 0.0), PreloadPoint(100, 3.0, 1.0, 0.0)),),
                         1.0, 0)
    assert plan_preloads([host, shared], ElkMachine(10_000), "static").total_s == pytest.approx(24.0)
    for design in ("elk-dyn", "elk-full"):
        sched = plan_preloads([host, shared], ElkMachine(10_000), design)
        assert sched.preload_choice == (1, 0)
        assert sched.total_s == pytest.approx(21.1)


def test_stretch_grid_brackets_no_contention_to_the_longest_stretch():
    from tvm_icca.elk.designs import STRETCH_GRID
    from tvm_icca.elk.inductive_draft import MAX_STRETCH

    assert STRETCH_GRID[0] == 1.0 and STRETCH_GRID[-1] <= MAX_STRETCH < STRETCH_GRID[-1] * 2 ** 0.5
    assert all(b / a == pytest.approx(2 ** 0.5) for a, b in zip(STRETCH_GRID, STRETCH_GRID[1:]))


def test_screened_stretch_is_the_best_price_on_the_truncated_model(monkeypatch):
    import tvm_icca.elk.designs as D
    from tvm_icca.elk import reorder

    for seed in range(3):
        ops = synthetic_llm(3, seed=seed, hbm_bw=10e9 * (seed + 1))
        machine = ElkMachine(SRAM)
        rc = D._reorder_candidates(ops, machine, with_perms=False)
        assert rc is not None and rc.layers.count == 3
        memo, stats = {}, PlanStats()
        got = D._screened_stretch(ops, machine, memo, stats, rc, None)
        small = reorder.truncate(ops, rc.layers, min(rc.layers.count, D.SCREEN_LAYERS))
        order = tuple(i for i, o in enumerate(small) if o.loads)
        totals = {}
        for st in D.STRETCH_GRID:
            try:
                totals[st] = finish_draft(small, machine, "elk-dyn",
                                       inductive_draft(small, machine, order, {}, st), stats).total_s
            except (InfeasibleError, ValueError):
                pass
        if not totals:
            assert got is None
            continue
        assert totals[got] == min(totals.values())
        # and the whole-model plan with it is never worse than without it
        with_it = plan_preloads(ops, machine, "elk-dyn").total_s
        monkeypatch.setattr(D, "_screened_stretch", lambda *a: None)
        assert with_it <= plan_preloads(ops, machine, "elk-dyn").total_s + 1e-12
        monkeypatch.undo()


def test_fitting_horizons_are_the_best_horizons_for_fixed_points():
    """Preloading as early as memory allows never slows a schedule down (device rules are
    monotone in the horizons), and no valid horizon vector with the same points fits more."""
    from dataclasses import replace

    import tvm_icca.elk.draft as D

    rng = random.Random(5)
    for ops, machine in _cases(4):
        for design in ("basic", "static", "elk-dyn"):
            s = plan_preloads(ops, machine, design)
            hz = D.fitting_horizons(ops, machine, s.preload_order, s.exec_choice, s.preload_choice)
            assert hz is not None
            check_horizons(len(ops), s.preload_order, hz)
            assert all(a >= b for a, b in zip(hz, s.horizon))
            best = estimate(ops, machine, replace(s, horizon=tuple(hz))).total_s
            assert best <= s.total_s * (1 + 1e-12)
            # one more preload ahead of any operator overflows its window
            for i in rng.sample(range(len(ops)), min(5, len(ops))):
                if hz[i] < len(s.preload_order) and (i + 1 == len(ops) or hz[i] < hz[i + 1]):
                    more = list(hz)
                    more[i] += 1
                    with pytest.raises(ValueError):
                        estimate(ops, machine, replace(s, horizon=tuple(more)))


def test_refinement_never_worsens_and_elk_contains_static():
    """Elk-Dyn's candidates contain Static's schedule and the refinement only keeps
    improvements, so Elk-Dyn <= Static and the refined schedule <= its start on the estimate."""

    for ops, machine in _cases(4):
        static = plan_preloads(ops, machine, "static")
        refined = refine(ops, machine, static)
        assert refined.total_s <= static.total_s * (1 + 1e-12)
        check_horizons(len(ops), refined.preload_order, refined.horizon)
        assert refined.total_s == pytest.approx(estimate(ops, machine, refined).total_s)
        assert plan_preloads(ops, machine, "elk-dyn").total_s <= static.total_s * (1 + 1e-12)


def test_joint_start_prefers_a_cheaper_preload_over_a_slightly_faster_execution():
    """Elk §4.3's fastest plan over the three trade-offs: a 5% faster execute point whose
    preload is twice the link time loses to the next point when preloads are priced with
    contention, and wins when they are not."""
    import tvm_icca.elk.inductive_draft as D

    op = OpTradeoffs("x", (ExecPoint(10e-6, 200_000, 2e-6), ExecPoint(10.5e-6, 120_000, 2e-6)),
                     ((PreloadPoint(160_000, 0.0, 30e-6, 29e-6),
                       PreloadPoint(80_000, 15e-6, 30e-6, 14.5e-6)),
                      (PreloadPoint(80_000, 0.0, 30e-6, 14.5e-6),)), 1e6, 0)
    trimmed, offset = D._joint_starts([op], None)
    assert offset == [0] and trimmed[0] is op
    trimmed, offset = D._joint_starts([op], 2.0)
    assert offset == [1] and trimmed[0].execs == op.execs[1:] and trimmed[0].key != op.key


def test_refinement_on_a_deep_model_is_searched_on_its_screen_and_never_worse():
    """With more layers than the screen, the refinement searches the cut model and carries
    the layer positions it changes to every identical layer: the result is valid, never
    worse than its start, and each changed position takes one point across all layers."""
    import tvm_icca.elk.designs as D
    from tvm_icca.elk import reorder

    for seed in range(3):
        ops = synthetic_llm(D.SCREEN_LAYERS + 3, seed=seed, hbm_bw=8e9 * (seed + 1))
        machine = ElkMachine(int(SRAM * (0.9 + 0.3 * seed)))
        layers = reorder.detect_layers([o.key for o in ops])
        assert layers is not None and layers.count > D.SCREEN_LAYERS
        start = plan_preloads(ops, machine, "static")
        refined = refine(ops, machine, start)
        assert refined.total_s <= start.total_s * (1 + 1e-12)
        check_horizons(len(ops), refined.preload_order, refined.horizon)
        assert refined.total_s == pytest.approx(estimate(ops, machine, refined).total_s)
        for r in range(layers.period):
            members = range(layers.start + r, layers.end, layers.period)
            points = {(refined.exec_choice[i], refined.preload_choice[i]) for i in members}
            before = {(start.exec_choice[i], start.preload_choice[i]) for i in members}
            assert points == before or len(points) == 1


@pytest.mark.parametrize("sram", [500, 23 * 1024, 616 * 1024, 1464 * 1024])
def test_static_sweeps_every_10_kib_or_finer(sram):
    """Static's split is the best of a sweep (Elk §6.1) at least as fine as the Elk artifact's
    10 KiB steps of execution space, and never coarser than 1/24 of SRAM on a small chip."""
    got = static_reservations(sram)
    assert got[0] == 0 and got[-1] < sram and got == sorted(set(got))
    gaps = [b - a for a, b in zip(got, got[1:])] + [sram - got[-1]]
    assert max(gaps) <= min(STATIC_STEP_BYTES, -(-sram // STATIC_SPLITS))
    # no finer than needed: as many sizes as 10 KiB steps, or 24
    assert len(got) <= max(STATIC_SPLITS, -(-sram // STATIC_STEP_BYTES))
    if sram == 616 * 1024:      # an IPU core's SRAM less the 8 KiB shift buffer
        assert len(got) == 62


def test_static_pruned_by_the_best_so_far_is_the_best_of_every_candidate():
    """Static's sweep stops a candidate's estimate once it cannot beat the best so far
    (issue 40): the result is the best of all its candidates estimated in full, the first on
    ties (the candidates and their order: ``_static_sweep`` then Basic)."""
    from tvm_icca.elk import designs  # pylint: disable=import-outside-toplevel

    for ops, machine in _cases(4):
        stats = PlanStats()
        full = []
        for draft in designs._static_sweep(ops, machine) + [designs._basic(ops, machine)]:
            try:
                full.append(finish_draft(ops, machine, "static", draft, stats))
            except (InfeasibleError, ValueError):
                continue
        want = min(full, key=lambda s: s.total_s)
        got = plan_preloads(ops, machine, "static")
        assert (got.exec_choice, got.preload_choice, got.preload_order, got.horizon) == \
            (want.exec_choice, want.preload_choice, want.preload_order, want.horizon)
        assert got.total_s == want.total_s


def test_local_search_reuses_only_what_it_would_find_again(monkeypatch):
    """The local search remembers candidates it estimated against the same best: it ends on
    the schedule the search without that memo ends on, estimating fewer schedules."""
    import tvm_icca.elk.refine as refine_module  # pylint: disable=import-outside-toplevel

    calls = []
    original = refine_module.schedule_at_points

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    reference_calls = []

    def reference(*args, **kwargs):
        reference_calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(refine_module, "schedule_at_points", counted)
    totals = []
    for ops, machine in _cases(3):
        start = plan_preloads(ops, machine, "static")
        calls.clear()
        got = refine_module.local_search(ops, machine, start)
        with_memo = len(calls)
        # the reference: the same search, every candidate estimated (no memo)
        best = start
        classes = {}
        layers = refine_module.reorder.detect_layers([o.key for o in ops])
        for i, op in enumerate(ops):
            if sum(len(f) for f in op.preloads) + (0 if op.loads else len(op.execs)) <= 1:
                continue
            inside = layers is not None and layers.start <= i < layers.end
            classes.setdefault(("layer", (i - layers.start) % layers.period) if inside else ("op", i),
                               []).append(i)
        first = reference(ops, machine, start.design, start.preload_order, list(start.exec_choice),
                         list(start.preload_choice), start.stats.source, start.stats,
                         stop_at=start.total_s)
        if first is not None and first.total_s < start.total_s:
            best = first
        for _ in range(refine_module.REFINE_SWEEPS):
            improved = False
            for members in classes.values():
                op = ops[members[0]]
                alts = ([(e, c) for e in range(len(op.execs)) for c in range(len(op.preloads[e]))]
                        if op.loads else [(e, -1) for e in range(len(op.execs))])
                for e, c in alts:
                    if all(best.exec_choice[i] == e and best.preload_choice[i] == c for i in members):
                        continue
                    ex, pc = list(best.exec_choice), list(best.preload_choice)
                    for i in members:
                        ex[i], pc[i] = e, c
                    bar = best.total_s * (1 - 1e-9)
                    cand = reference(ops, machine, start.design, start.preload_order, ex, pc,
                                    start.stats.source + ", refined", start.stats, stop_at=bar)
                    if cand is not None and cand.total_s < bar:
                        best, improved = cand, True
            if not improved:
                break
        assert (got.exec_choice, got.preload_choice, got.horizon, got.total_s) == \
            (best.exec_choice, best.preload_choice, best.horizon, best.total_s)
        assert with_memo <= len(reference_calls)
        totals.append((with_memo, len(reference_calls)))
        reference_calls.clear()
    # the sweep that confirms the last improvement is where it saves
    assert sum(m for m, _ in totals) < sum(r for _, r in totals)


def test_ideal_counts_the_preload_space_its_program_holds():
    """Ideal runs every operator at its fastest execute point, so its program carries that
    point's MinPreload chunks: the preload SRAM must fit those, and an operator's own preload
    beside the ones issued before it starts (the device's rule, :mod:`runtime_sim.contract.
    sram_budget`). Counting each operator at the smallest preload space of any point (20 here,
    a slower point's) preloaded the whole model ahead into 200 bytes: 6 x 60 on the device,
    as DiT-XL overflowed its 1,104-core chip by 1,072 bytes per core."""
    fast = (PreloadPoint(60, 0.0, 1e-3, 0.0),)
    slow = (PreloadPoint(20, 0.0, 1e-3, 0.0),)
    op = OpTradeoffs("mm", (ExecPoint(1e-3, 100, 0.0), ExecPoint(2e-3, 50, 0.0)), (fast, slow), 1.0, 0)
    ops = [op] * 6
    for machine in (ElkMachine(200), ElkMachine(190, preload_sram_bytes=200)):
        s = plan_preloads(ops, machine, "ideal")
        assert list(s.exec_choice) == [0] * 6 and list(s.preload_choice) == [0] * 6
        assert _stream_preload_peak(ops, s) == 180       # 3 x 60: own + two ahead
        assert estimate(ops, machine, s) == s.timeline
        # one ahead more does not fit, and the estimate says so
        wider = dataclasses.replace(s, horizon=tuple(min(h + 1, 6) for h in s.horizon))
        with pytest.raises(ValueError, match="exceeds SRAM"):
            estimate(ops, machine, wider)


def _stream_peak(ops, sched) -> int:
    """The most SRAM per core at any instruction of the schedule's stream, walked as the
    device does (:func:`runtime_sim.contract.resting.stream_sram_peaks`): a preload holds its
    space from its issue until its operator starts; an operator's execution holds its space
    and live bytes; between two executes the device holds the next operator's waiting bytes."""
    space = {j: ops[j].preloads[sched.exec_choice[j]][sched.preload_choice[j]].space
             for j in sched.preload_order}
    pending, issued, peak = 0, 0, 0
    for i, op in enumerate(ops):
        while issued < sched.horizon[i]:    # issued after execute(i - 1), before execute(i)
            pending += space[sched.preload_order[issued]]
            issued += 1
            peak = max(peak, op.waiting_bytes + pending)
        pending -= space.get(i, 0)
        peak = max(peak, op.execs[sched.exec_choice[i]].space + op.live_bytes + pending)
    return peak


def _with_waiting(ops, rng):
    """``ops`` holding more before each operator starts than while it runs (its inputs still
    where their producers left them), up to a fifth of the synthetic SRAM."""
    return [dataclasses.replace(o, waiting_bytes=o.live_bytes + rng.randrange(SRAM // 5)) for o in ops]


@pytest.mark.parametrize("design", [d for d in DESIGNS if d != "ideal"])
def test_preloads_fit_beside_what_waits_before_each_operator(design):
    """Every design's stream fits SRAM at the preloads issued between two executes, beside the
    tensors the device holds then, not only while operators execute."""
    rng = random.Random(5)
    binding = 0
    for ops, machine in _cases(4):
        ops = _with_waiting(ops, rng)
        try:
            s = plan_preloads(ops, machine, design)
        except InfeasibleError:
            continue
        assert _stream_peak(ops, s) <= machine.sram_bytes
        assert max(s.timeline.window_bytes) <= machine.sram_bytes
        # the instant before an execute bound the schedule somewhere (the test tests it)
        bare = plan_preloads([dataclasses.replace(o, waiting_bytes=0) for o in ops], machine, design)
        binding += _stream_peak(ops, bare) > machine.sram_bytes
    assert binding


def test_estimate_refuses_preloads_that_overflow_before_an_operator_starts():
    """The memory model counts the instant before ``execute(i)``: its own preload and its
    window beside what the device holds then (overlap_model.window_bytes), and every design
    keeps its stream within it."""
    ep = ExecPoint(1e-6, 400, 1e-7)
    pre = (PreloadPoint(300, 0.0, 1e-6, 1e-7),)
    ops = [OpTradeoffs(k, (ep,), (pre,), 300.0, 0) for k in "abc"]
    machine = ElkMachine(1000)
    # b's and c's preloads issued after a ends: 300 + 300 beside what waits before b
    draft = Draft([0, 0, 0], [0, 0, 0], (0, 1, 2), [1, 3, 3], "by hand")
    assert finish_draft(ops, machine, "basic", draft, PlanStats()).timeline.window_bytes[1] == 700
    held = [ops[0], dataclasses.replace(ops[1], waiting_bytes=500), ops[2]]
    with pytest.raises(ValueError, match="window needs 1100 B"):
        finish_draft(held, machine, "basic", draft, PlanStats())
    late = dataclasses.replace(draft, horizon=[1, 2, 3])   # c's preload after b starts
    assert finish_draft(held, machine, "basic", late, PlanStats()).timeline.window_bytes[1] == 800
    for design in DESIGNS:
        if design != "ideal":
            assert _stream_peak(held, plan_preloads(held, machine, design)) <= machine.sram_bytes
