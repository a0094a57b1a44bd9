"""The five designs of Elk §6.1 on trade-off tables: which schedule each one finds.

* ``basic``: each op its fastest execute point that fits; only the next preload may overlap an
  execution, at MaxPreload if it fits beside it, else at the largest preload point that fits, else
  not at all.
* ``static``: one preload/execution split for the whole model, swept over the SRAM reserved for
  preloads in steps of ``STATIC_STEP_BYTES`` (or ``1/STATIC_SPLITS`` of SRAM if finer,
  :func:`static_reservations`); each op its fastest execute point that fits the rest;
  operators preloaded in order while they fit the reserved space; all preload points MaxPreload or
  all MinPreload, whichever is faster. Basic is the sweep's degenerate end point and a candidate.
* ``elk-dyn``: the inductive scheduling (§4.2) with the cost-aware allocation (§4.3), execution
  order, every operator starting at its fastest plan over execution, distribution and preload
  time together (:mod:`tvm_icca.elk.inductive_draft`); the Static schedule is a candidate too
  (its split is one point of Elk's space). The best candidate is refined
  (:func:`tvm_icca.elk.refine.refine`): per operator class, every (execute, preload) point
  against the whole-schedule estimate, preloads issued as early as memory allows
  (:func:`tvm_icca.elk.draft.fitting_horizons`).
* ``elk-full``: Elk-Dyn plus preload order permutation (§4.4): candidates are screened on a model
  truncated to ``SCREEN_LAYERS`` layers, the ``SCREEN_TOP`` best are planned on the whole model,
  each order's best is refined, and every suffix-tree order is tried at the refined points
  (:func:`_reordered_points`).
* ``ideal``: separate interconnect, the full SRAM for execution and another full SRAM for preloads
  (:func:`runtime_sim.contract.sram_budget.sram_budget`), every op at its fastest execute point
  and that point's smallest preload space (MinPreload: the chunks its program carries) with zero
  distribution time and its shortest load time over all points; it is evaluated on every
  preload order Elk-Full may choose and takes the fastest.

So, by construction of the candidate sets, Elk-Full <= Elk-Dyn <= Static <= Basic on
:func:`estimate`. Ideal <= Elk-Full holds where the preload spaces of Ideal's points are no
larger than those Elk-Full runs: its durations are lower bounds of any design's, and its
horizons (as far ahead as a whole SRAM of preloads allows) upper bounds for the same order and
preload spaces. A design whose slower execute point carries a smaller preload can preload
further ahead than Ideal, which counts the space its own program holds (what the device
checks); the tests check the ordering on random models.

Each design's candidates are ranked by :func:`tvm_icca.elk.elk_schedule.estimate`, which prices a
schedule the way the device runs it. The search (§4.2-§4.3) prices contention as the paper does,
inside each window (:mod:`tvm_icca.elk.overlap_model`), and charges distribution time to the
window that shrank the preload point; its internal total is an estimate of the estimate.

This module holds the designs and their candidate sets; a draft and its estimate are
:mod:`tvm_icca.elk.draft`, the recurrence's draft :mod:`tvm_icca.elk.inductive_draft`, the
refinement :mod:`tvm_icca.elk.refine`.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tvm_icca.elk import reorder
from tvm_icca.elk.draft import Draft, OnStep, finish_draft, fitting_horizons, schedule_at_points
from tvm_icca.elk.inductive import InfeasibleError, early_members, min_horizons
from tvm_icca.elk.inductive_draft import MAX_STRETCH, average_stretch, inductive_draft
from tvm_icca.elk.overlap_model import side_bytes
from tvm_icca.elk.refine import SCREEN_LAYERS, Evaluations, local_search, refine
from tvm_icca.elk.elk_schedule import ElkSchedule, PlanStats, prefix_sums
from tvm_icca.elk.tradeoffs import ElkMachine, OpTradeoffs

DESIGNS = ("basic", "static", "elk-dyn", "elk-full", "ideal")
STATIC_SPLITS = 24          # at least 24 reserved preload sizes: 0, 1/24, ..., 23/24 of SRAM
#: Static's sweep step: the public Elk artifact sweeps the execution space in 10 KiB steps
#: (Elk §6.1: "the best static preload and execution space sizes for the entire DL model").
STATIC_STEP_BYTES = 10 * 1024
SCREEN_TOP = 3              # candidates planned on the whole model
MAX_SHIFT = 4               # Elk §4.4: each group moves at most 4 slots
MAX_ORDERS = 256            # cap on the suffix tree's leaves


# ----------------------------------------------------------------------------------- designs


def _fastest_fitting(op: OpTradeoffs, budget: int) -> int | None:
    for e, ep in enumerate(op.execs):
        if ep.space + op.live_bytes <= budget:
            return e
    return None


def _fastest_points(ops: Sequence[OpTradeoffs], machine: ElkMachine) -> list[int]:
    """Every operator's fastest execute point that fits the whole SRAM."""
    ex = []
    for i, op in enumerate(ops):
        e = _fastest_fitting(op, machine.sram_bytes)
        if e is None:
            raise InfeasibleError(f"operator {i} fits on chip with no execute point")
        ex.append(e)
    return ex


def _basic(ops: Sequence[OpTradeoffs], machine: ElkMachine) -> Draft:
    n = len(ops)
    order = tuple(i for i, o in enumerate(ops) if o.loads)
    K = len(order)
    m = min_horizons(n, order)
    ex = _fastest_points(ops, machine)
    pc = [0 if o.loads else -1 for o in ops]
    hz = [0] * n
    cap = K
    for i in range(n - 1, -1, -1):   # backwards, so a prefetched op fits every window it sits in
        h = m[i]
        own = 0
        if ops[i].loads:
            # i's own preload waits beside what the device holds before i starts; the
            # windows before i may only shrink it further
            front = ops[i].preloads[ex[i]]
            c = next((c for c in range(pc[i], len(front))
                      if ops[i].waiting_bytes + front[c].space <= machine.sram_bytes), None)
            if c is None:
                raise InfeasibleError(f"operator {i}: no preload point fits beside the "
                                      f"{ops[i].waiting_bytes} bytes held before it starts")
            pc[i], own = c, front[c].space
        if m[i] < K and m[i] + 1 <= cap:
            j = order[m[i]]
            free = machine.sram_bytes - int(side_bytes(ops[i].execs[ex[i]].space, ops[i].live_bytes,
                                                       ops[i].waiting_bytes, own))
            front = ops[j].preloads[ex[j]]
            c = next((c for c in range(pc[j], len(front)) if front[c].space <= free), None)
            if c is not None:
                pc[j], h = c, m[i] + 1
        hz[i] = cap = h
    return Draft(ex, pc, order, hz, "basic")


def _capacity_horizons(n: int, order: Sequence[int], space_of: dict[int, int], cap: int,
                       hold_own: bool = False) -> list[int] | None:
    """Largest horizons whose windows' preload spaces fit in ``cap`` (None if the early members
    alone do not fit). ``hold_own``: operator ``i``'s own preload space is in ``cap`` too (a
    preload SRAM of its own, Ideal: the preloads issued just before ``execute(i)`` sit beside
    ``i``'s, which becomes execution space only when ``i`` starts; shared SRAM counts it in
    ``i``'s execution space)."""
    m = min_horizons(n, order)
    early = early_members(n, order, m)
    pre = prefix_sums([space_of[j] for j in order])
    hz, prev = [], 0
    for i in range(n):
        room = cap - sum(space_of[j] for j in early[i]) - (space_of.get(i, 0) if hold_own else 0)
        if room < 0:
            return None
        h = bisect.bisect_right(pre, pre[m[i]] + room) - 1
        h = max(h, m[i], prev)
        hz.append(h)
        prev = h
    return hz


def static_reservations(sram_bytes: int) -> list[int]:
    """The preload reservations Static tries (Elk §6.1), smallest first: every
    ``STATIC_STEP_BYTES`` of SRAM, or ``STATIC_SPLITS`` even fractions of it if that is finer
    (a small chip), from 0 (Basic's split) to below the whole SRAM."""
    splits = max(STATIC_SPLITS, -(-sram_bytes // STATIC_STEP_BYTES))
    return sorted({sram_bytes * k // splits for k in range(splits)})


def _static_sweep(ops: Sequence[OpTradeoffs], machine: ElkMachine) -> list[Draft]:
    n = len(ops)
    order = tuple(i for i, o in enumerate(ops) if o.loads)
    drafts = []
    for reserved in static_reservations(machine.sram_bytes):
        ex = [_fastest_fitting(op, machine.sram_bytes - reserved) for op in ops]
        if any(e is None for e in ex):
            break       # larger reservations leave even less execution space
        for which, name in ((0, "max"), (-1, "min")):
            pc = [(len(o.preloads[ex[i]]) + which) % len(o.preloads[ex[i]]) if o.loads else -1
                  for i, o in enumerate(ops)]
            space = {j: ops[j].preloads[ex[j]][pc[j]].space for j in order}
            hz = _capacity_horizons(n, order, space, reserved)
            # and beside what the device holds before each operator starts
            fitting = fitting_horizons(ops, machine, order, ex, pc)
            if hz is not None and fitting is not None:
                hz = [min(a, b) for a, b in zip(hz, fitting)]
                drafts.append(Draft(list(ex), pc, order, hz, f"static {reserved} B {name}"))
    return drafts

def _best(cands: Sequence[ElkSchedule], finalists: list[ElkSchedule] | None = None
          ) -> ElkSchedule:
    """The fastest of ``cands`` on the estimate; each is added to ``finalists`` (when given)."""
    if finalists is not None:
        finalists.extend(cands)
    return min(cands, key=lambda s: s.total_s)     # first wins ties: candidates listed by preference


def _stage(on_step: OnStep, name: str) -> OnStep:
    """``on_step`` told ``name`` as the stage of every schedule estimated."""
    return None if on_step is None else lambda _inner=None: on_step(name)


def _try(ops, machine, design, draft_fn, stats, on_step: OnStep = None,
         stop_at: float = math.inf) -> ElkSchedule | None:
    try:
        return finish_draft(ops, machine, design, draft_fn(), stats, on_step, stop_at)
    except (InfeasibleError, ValueError):
        return None


def _plan_static(ops, machine, stats, on_step: OnStep = None) -> ElkSchedule:
    """The best of Static's sweep and Basic (the first on ties). Each candidate's estimate
    stops once it is proven no faster than the best so far (``stop_at``, exact: such a
    candidate could not be chosen), which on a 40-layer LLM spares most of the sweep's
    whole-model timelines."""
    step = _stage(on_step, "static sweep")
    best: ElkSchedule | None = None
    for d in _static_sweep(ops, machine):
        s = _try(ops, machine, "static", lambda d=d: d, stats, step,
                 best.total_s if best is not None else math.inf)
        if s is not None and (best is None or s.total_s < best.total_s):
            best = s
    try:
        basic = finish_draft(ops, machine, "static", _basic(ops, machine), stats, step,
                             best.total_s if best is not None else math.inf)
    except ValueError:      # Basic's points do not fit (InfeasibleError too): the sweep's may
        if best is None:
            raise
        basic = None
    if basic is not None and (best is None or basic.total_s < best.total_s):
        best = basic
    return best


#: Link shares a preload's delivery may get beside the executions, screened as contention
#: prices (:func:`_screened_stretch`): from the whole links down by factors of sqrt(2) to
#: 1/MAX_STRETCH, i.e. stretches 1, 1.41, 2, ... The grid only has to bracket the price that
#: schedules best; the forward estimate, which resolves contention as the device does, picks.
STRETCH_GRID = tuple(2.0 ** (k / 2) for k in range(int(2 * math.log2(MAX_STRETCH)) + 1))


def _screened_stretch(ops, machine, memo, stats, rc: "_Reorder | None",
                      perm: tuple[int, ...] | None, on_step: OnStep = None) -> float | None:
    """The contention price (preload stretch) that schedules ``perm``'s order best on the
    model truncated to ``SCREEN_LAYERS`` layers (as the orders are screened, §4.4), among
    :data:`STRETCH_GRID`; ``None`` without repeated layers.

    The average stretch of :func:`~tvm_icca.elk.inductive_draft.average_stretch` is the link
    share the fastest execute points leave over the whole run, but a preload's delivery
    overlaps the executions the schedule puts beside it (distribution phases included, all link
    traffic), and a preload predicted longer is issued earlier, which is what keeps the one HBM queue busy: on
    Llama2-13B decode the best price is about twice the average."""
    if rc is None:
        return None
    n_layers = min(rc.layers.count, SCREEN_LAYERS)
    small = reorder.truncate(ops, rc.layers, n_layers)
    order = reorder.build_order(small, rc.layers, rc.groups, perm, n_layers)
    best, best_t = None, math.inf
    for stretch in STRETCH_GRID:
        try:
            total = finish_draft(small, machine, "elk-dyn",
                            inductive_draft(small, machine, order, memo, stretch), stats,
                            _stage(on_step, "screening contention prices")).total_s
        except (InfeasibleError, ValueError):
            continue
        if total < best_t:
            best, best_t = stretch, total
    return best


def _stretches(ops, machine, memo, stats, rc, perm, on_step: OnStep = None) -> list[float | None]:
    """Contention prices tried on the whole model: none (contention inside the windows),
    the run's average stretch, and the screened one."""
    out = [None, average_stretch(ops)]
    screened = _screened_stretch(ops, machine, memo, stats, rc, perm, on_step)
    if screened is not None and screened not in out:
        out.append(screened)
    return out


def _plan_dyn(ops, machine, memo, stats, on_step: OnStep = None, group: bool = True,
              evaluations: Evaluations | None = None,
              finalists: list[ElkSchedule] | None = None) -> ElkSchedule:
    """§4.2 + §4.3 in execution order: the recurrence at each contention price, and Static's
    schedule, the best refined on the cut model (:func:`~tvm_icca.elk.refine.refine`), then
    once more on the whole model (:func:`~tvm_icca.elk.refine.local_search`): the cut model does
    not show every interaction of the layers (Gemma2-27B's estimate: 5.651 -> 5.524 ms per
    token), and one whole-model search of the chosen schedule costs a few seconds where one per
    candidate would cost several times that."""
    order = tuple(i for i, o in enumerate(ops) if o.loads)
    cands = []
    rc = _reorder_candidates(ops, machine, with_perms=False)
    for stretch in _stretches(ops, machine, memo, stats, rc, None, on_step):
        s = _try(ops, machine, "elk-dyn",
                 lambda st=stretch: inductive_draft(ops, machine, order, memo, st), stats,
                 _stage(on_step, "inductive schedules"))
        if s is not None:
            cands.append(s)
    try:
        cands.append(replace(_plan_static(ops, machine, stats, on_step), design="elk-dyn"))
    except ValueError:      # no Static split fits (InfeasibleError too): the recurrence's may
        if not cands:
            raise
    refining = _stage(on_step, "refining")
    refined = refine(ops, machine, _best(cands, finalists), refining, group_pieces=group,
                     evaluations=evaluations)
    return local_search(ops, machine, refined, refining, group_pieces=group,
                        evaluations=evaluations)


@dataclass(frozen=True)
class _Reorder:
    layers: reorder.LayerStructure
    groups: reorder.LayerGroups
    perms: tuple[tuple[int, ...], ...]


def _reorder_candidates(ops, machine, with_perms: bool = True) -> _Reorder | None:
    """The layer structure and the suffix tree's orders (None without repeated layers, or,
    ``with_perms``, without an order other than the identity)."""
    layers = reorder.detect_layers([o.key for o in ops])
    if layers is None:
        return None
    groups = reorder.layer_groups(ops, layers)
    if not with_perms:
        return _Reorder(layers, groups, ())
    perms = reorder.candidate_orders(ops, machine, layers, groups, MAX_SHIFT, MAX_ORDERS)
    return _Reorder(layers, groups, tuple(perms)) if perms else None


def _screened(ops, machine, memo, stats,
              on_step: OnStep = None) -> tuple[_Reorder | None, list[tuple[int, ...]]]:
    """Elk-Full's candidate orders: every suffix-tree order, screened on a model truncated to
    ``SCREEN_LAYERS`` layers; the ``SCREEN_TOP`` best permutations (deterministic)."""
    rc = _reorder_candidates(ops, machine)
    if rc is None:
        return None, []
    n_layers = min(rc.layers.count, SCREEN_LAYERS)
    small = reorder.truncate(ops, rc.layers, n_layers)
    scored = []
    step = _stage(on_step, f"screening {len(rc.perms)} orders")
    for perm in rc.perms:
        order = reorder.build_order(small, rc.layers, rc.groups, perm, n_layers)
        try:
            draft = inductive_draft(small, machine, order, memo)
            scored.append((finish_draft(small, machine, "elk-full", draft, stats, step).total_s,
                           perm))
        except (InfeasibleError, ValueError):
            continue
    scored.sort(key=lambda x: x[0])
    return rc, [perm for _, perm in scored[:SCREEN_TOP]]


def _reordered_points(ops, machine, rc: _Reorder, sched: ElkSchedule,
                      on_step: OnStep = None, group: bool = True,
                      evaluations: Evaluations | None = None) -> list[ElkSchedule]:
    """Every suffix-tree order (§4.4) with ``sched``'s execute and preload points, preloads as
    early as memory allows; the fastest, refined, if it beats ``sched`` (else nothing).

    The orders were screened with the recurrence's unrefined points on a truncated model;
    the refined points can favour another order (the screen's third best ranks first)."""
    best = sched
    step = _stage(on_step, "orders at the refined points")
    for perm in (tuple(range(len(rc.groups.groups))),) + rc.perms:
        order = reorder.build_order(ops, rc.layers, rc.groups, perm)
        if order == sched.preload_order:
            continue
        source = f"reordered {perm} at the refined points of {sched.stats.source}"
        s = schedule_at_points(ops, machine, sched.design, order, sched.exec_choice,
                       sched.preload_choice, source, sched.stats, step, stop_at=best.total_s)
        if s is not None and s.total_s < best.total_s:
            best = replace(s, stats=replace(s.stats, avg_displacement=reorder.layer_displacement(perm),
                                            avg_position_displacement=reorder.order_displacement(order)))
    return [] if best is sched else [refine(ops, machine, best, _stage(on_step, "refining"),
                                            group_pieces=group, evaluations=evaluations)]


def reorder_at_points(ops: Sequence[OpTradeoffs], machine: ElkMachine, sched: ElkSchedule, *,
                      on_step: OnStep = None, group_pieces: bool = True) -> ElkSchedule:
    """Elk-Full's last change of order (§4.4): ``sched``'s points on every suffix-tree order
    of ``ops``, the fastest refined if it beats ``sched`` (:func:`_reordered_points`), else
    ``sched``. :mod:`tvm_icca.elk.period_reuse` runs it on the whole run, whose ranking of
    the orders is not the cut's."""
    rc = _reorder_candidates(ops, machine)
    if rc is None:
        return sched
    return _best([sched] + _reordered_points(ops, machine, rc, sched, on_step, group_pieces))


def _plan_full(ops, machine, memo, stats, on_step: OnStep = None, group: bool = True,
               evaluations: Evaluations | None = None,
               finalists: list[ElkSchedule] | None = None) -> ElkSchedule:
    dyn = _plan_dyn(ops, machine, memo, stats, on_step, group, evaluations, finalists)
    rc, top = _screened(ops, machine, memo, stats, on_step)
    if rc is None:
        return replace(dyn, design="elk-full")
    refined = [replace(dyn, design="elk-full")]     # Elk-Dyn's (execution order), refined already
    for k, perm in enumerate(top):
        order = reorder.build_order(ops, rc.layers, rc.groups, perm)
        cands = []
        step = _stage(on_step, f"order {k + 1}/{len(top)}")
        for stretch in _stretches(ops, machine, memo, stats, rc, perm, step):
            s = _try(ops, machine, "elk-full",
                     lambda o=order, st=stretch: inductive_draft(ops, machine, o, memo, st), stats,
                     step)
            if s is not None:
                s = replace(s, stats=replace(s.stats, source=f"reordered {perm}, {s.stats.source}",
                                             avg_displacement=reorder.layer_displacement(perm),
                                             avg_position_displacement=reorder.order_displacement(order)))
                cands.append(s)
        if cands:   # each order's best, refined: refinement reranks the orders
            refined.append(refine(ops, machine, _best(cands, finalists), step, group_pieces=group,
                                  evaluations=evaluations))
    best = _best(refined, finalists)
    # then every order at the refined points: refinement can favour an order the screen missed
    best = _best([best] + _reordered_points(ops, machine, rc, best, on_step, group, evaluations),
                 finalists)
    # once on the whole model (see _plan_dyn)
    best = local_search(ops, machine, best, _stage(on_step, "refining"), group_pieces=group,
                        evaluations=evaluations)
    return replace(best, stats=replace(best.stats, orders_tried=1 + len(rc.perms)))


def _plan_ideal(ops, machine, memo, stats, on_step: OnStep = None) -> ElkSchedule:
    """Ideal on every order Elk-Full may choose (in order, and every suffix-tree order: Elk-Full
    may move its refined points to any of them), so that Ideal <= Elk-Full holds order by
    order."""
    n = len(ops)
    ex = _fastest_points(ops, machine)
    pc = [len(o.preloads[ex[i]]) - 1 if o.loads else -1 for i, o in enumerate(ops)]
    # the preload space of the point the program carries (its execute plan's MinPreload):
    # what the device holds. The smallest space over every execute point's front is a plan
    # the program does not run: horizons counted with it overfilled DiT-XL's preload SRAM
    # on 1,104 cores by 1,072 bytes per core (Elk Fig. 23 sweep)
    space = {j: o.preloads[ex[j]][pc[j]].space for j, o in enumerate(ops) if o.loads}
    orders = [tuple(i for i, o in enumerate(ops) if o.loads)]
    rc = _reorder_candidates(ops, machine)
    if rc is not None:
        orders += [reorder.build_order(ops, rc.layers, rc.groups, p) for p in rc.perms]
    ideal_machine = replace(machine, separate_interconnect=True)
    cands = []
    for order in orders:
        hz = _capacity_horizons(n, order, space, machine.preload_capacity, hold_own=True)
        if hz is not None:
            s = _try(ops, ideal_machine, "ideal",
                     lambda o=order, h=hz: Draft(ex, pc, o, h, "ideal"), stats,
                     _stage(on_step, "orders"))
            if s is not None:
                cands.append(s)
    if not cands:
        raise InfeasibleError("ideal: no preload order fits")
    best = _best(cands)
    return replace(best, stats=replace(best.stats, orders_tried=len(orders)))


def plan_preloads(ops: Sequence[OpTradeoffs], machine: ElkMachine, design: str, *,
                  on_step: OnStep = None, group_pieces: bool = True,
                  finalists: list[ElkSchedule] | None = None) -> ElkSchedule:
    """Plan the preloads and executions of ``ops`` (execution order) with one of ``DESIGNS``;
    ``on_step(stage)`` after every candidate schedule estimated (the search runs for tens of
    seconds on a large LLM; :data:`~tvm_icca.elk.draft.OnStep`). ``group_pieces``: the
    refinement's classes follow the nested repeats (:func:`~tvm_icca.elk.refine.local_search`).
    ``finalists``: when given, Elk-Dyn and Elk-Full add to it the schedule they return, then
    every candidate they chose among on the estimate of ``ops`` (a search on a cut of a run
    ranks them again on the run: :mod:`tvm_icca.elk.period_reuse`)."""
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}; one of {DESIGNS}")
    t0 = time.perf_counter()
    stats = PlanStats()
    memo: dict = {}     # window allocations, shared by every order tried in this call
    evaluations = Evaluations(ops)  # the refinements' candidates, shared likewise
    chosen: list[ElkSchedule] | None = [] if finalists is not None else None
    if design == "basic":
        sched = finish_draft(ops, machine, design, _basic(ops, machine), stats, on_step)
    elif design == "static":
        sched = _plan_static(ops, machine, stats, on_step)
    elif design == "elk-dyn":
        sched = _plan_dyn(ops, machine, memo, stats, on_step, group_pieces, evaluations, chosen)
    elif design == "elk-full":
        sched = _plan_full(ops, machine, memo, stats, on_step, group_pieces, evaluations, chosen)
    else:
        sched = _plan_ideal(ops, machine, memo, stats, on_step)
    if finalists is not None:
        finalists.append(sched)
        finalists.extend(chosen)
    return replace(sched, stats=replace(sched.stats, planning_s=time.perf_counter() - t0))
