"""The five designs of Elk §6.1 on trade-off tables: which schedule each one finds.

* ``basic``: each op its fastest execute point that fits; only the next preload may overlap an
  execution, at MaxPreload if it fits beside it, else at the largest preload point that fits, else
  not at all.
* ``static``: one preload/execution split for the whole model, swept over ``STATIC_SPLITS``
  fractions of SRAM reserved for preloads; each op its fastest execute point that fits the rest;
  operators preloaded in order while they fit the reserved space; all preload points MaxPreload or
  all MinPreload, whichever is faster. Basic is the sweep's degenerate end point and a candidate.
* ``elk-dyn``: the inductive scheduling (§4.2) with the cost-aware allocation (§4.3), execution
  order, every operator starting at its fastest plan over execution, distribution and preload
  time together (:func:`_joint_starts`); the Static schedule is a candidate too (its split is
  one point of Elk's space). The best candidate is refined (:func:`_refine`): per operator
  class, every (execute, preload) point against the whole-schedule estimate, preloads issued
  as early as memory allows (:func:`fitting_horizons`).
* ``elk-full``: Elk-Dyn plus preload order permutation (§4.4): candidates are screened on a model
  truncated to ``SCREEN_LAYERS`` layers, the ``SCREEN_TOP`` best are planned on the whole model,
  each order's best is refined, and every suffix-tree order is tried at the refined points
  (:func:`_reordered_points`).
* ``ideal``: separate interconnect, the full SRAM for execution and another full SRAM for preloads,
  every op at its smallest preload space with zero distribution time and its shortest load time;
  it is evaluated on every preload order Elk-Full may choose and takes the fastest.

So, by construction of the candidate sets, Ideal <= Elk-Full <= Elk-Dyn <= Static <= Basic on
:func:`estimate` (for Ideal: its durations are lower bounds of any design's, and its horizons —
preload as far ahead as the preload SRAM allows — upper bounds, for the same order).

Each design's candidates are ranked by :func:`tvm_icca.elk.schedule.estimate`, which prices a
schedule the way the device runs it. The search (§4.2-§4.3) prices contention as the paper does,
inside each window (:mod:`tvm_icca.elk.overlap_model`), and charges distribution time to the
window that shrank the preload point; its internal total is an estimate of the estimate.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from runtime_sim.machine.stream_timing import preload_link_share
from tvm_icca.elk import reorder
from tvm_icca.elk.allocation import WindowPlan, WindowShrinker
from tvm_icca.elk.inductive import (
    InfeasibleError,
    early_members,
    inductive_schedule,
    min_horizons,
)
from tvm_icca.elk.overlap_model import window_bytes
from tvm_icca.elk.schedule import (
    ElkSchedule,
    PlanStats,
    Timeline,
    estimate,
    ideal_preload,
    order_structure,
    prefix_sums,
)
from tvm_icca.elk.tradeoffs import ElkMachine, OpTradeoffs, PreloadPoint

DESIGNS = ("basic", "static", "elk-dyn", "elk-full", "ideal")
STATIC_SPLITS = 24          # reserved preload fractions 0, 1/24, ..., 23/24 of SRAM
SCREEN_LAYERS = 3           # layers of the truncated model candidate orders are screened on
SCREEN_TOP = 3              # candidates planned on the whole model
MAX_SHIFT = 4               # Elk §4.4: each group moves at most 4 slots
MAX_ORDERS = 256            # cap on the suffix tree's leaves


# ----------------------------------------------------------------------------------- designs


@dataclass
class _Draft:
    """A schedule before estimation (mutable only inside one planning call)."""

    exec_choice: list[int]
    preload_choice: list[int]
    order: tuple[int, ...]
    horizon: list[int]
    source: str


def _finish(ops, machine, design: str, draft: _Draft, stats: PlanStats) -> ElkSchedule:
    sched = ElkSchedule(design, tuple(draft.exec_choice), tuple(draft.preload_choice), draft.order,
                        tuple(draft.horizon), Timeline((), (), (), (), (), (), (), 0.0), 0.0,
                        replace(stats, source=draft.source))
    tl = estimate(ops, machine, sched)
    return replace(sched, timeline=tl, total_s=tl.total_s)


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


def _basic(ops: Sequence[OpTradeoffs], machine: ElkMachine) -> _Draft:
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
        if m[i] < K and m[i] + 1 <= cap:
            j = order[m[i]]
            free = machine.sram_bytes - ops[i].execs[ex[i]].space - ops[i].live_bytes
            front = ops[j].preloads[ex[j]]
            c = next((c for c in range(pc[j], len(front)) if front[c].space <= free), None)
            if c is not None:
                pc[j], h = c, m[i] + 1
        hz[i] = cap = h
    return _Draft(ex, pc, order, hz, "basic")


def _capacity_horizons(n: int, order: Sequence[int], space_of: dict[int, int], cap: int) -> list[int] | None:
    """Largest horizons whose windows' preload spaces fit in ``cap`` (None if the early members
    alone do not fit)."""
    m = min_horizons(n, order)
    early = early_members(n, order, m)
    pre = prefix_sums([space_of[j] for j in order])
    hz, prev = [], 0
    for i in range(n):
        room = cap - sum(space_of[j] for j in early[i])
        if room < 0:
            return None
        h = bisect.bisect_right(pre, pre[m[i]] + room) - 1
        h = max(h, m[i], prev)
        hz.append(h)
        prev = h
    return hz


def fitting_horizons(ops: Sequence[OpTradeoffs], machine: ElkMachine, order: Sequence[int],
                     exec_choice: Sequence[int], preload_choice: Sequence[int]) -> list[int] | None:
    """The largest valid horizons whose windows fit SRAM with these execute and preload
    points (None if some operator's window does not fit even with no preload ahead).

    For fixed points they are the best horizons: under the device's rules (Elk §4.5,
    :func:`runtime_sim.machine.stream_timing.stream_times`) a preload issued earlier starts no later,
    its delivery progresses at the same share at every instant, so it ends no later, and an
    execute waits only for its own preload; so every start is monotone in the horizons."""
    n = len(ops)
    m, early = order_structure(n, tuple(order))
    space = [ops[j].preloads[exec_choice[j]][preload_choice[j]].space for j in order]
    pos = {j: k for k, j in enumerate(order)}
    pre = prefix_sums(space)
    hz = [0] * n
    nxt = len(order)
    for i in range(n - 1, -1, -1):
        ahead = [space[pos[j]] for j in early[i]] if early[i] else ()
        used = window_bytes(ops[i].execs[exec_choice[i]].space, ahead, ops[i].live_bytes)
        room = machine.sram_bytes - used
        if room < 0:
            return None
        h = min(bisect.bisect_right(pre, pre[m[i]] + room) - 1, nxt)
        if h < m[i]:
            return None
        hz[i] = nxt = h
    return hz


def _at_points(ops: Sequence[OpTradeoffs], machine: ElkMachine, design: str, order: Sequence[int],
               exec_choice: Sequence[int], preload_choice: Sequence[int], source: str,
               stats: PlanStats) -> ElkSchedule | None:
    """The schedule with these points and order, every preload issued as early as memory
    allows (:func:`fitting_horizons`), estimated; None if it does not fit."""
    hz = fitting_horizons(ops, machine, order, exec_choice, preload_choice)
    if hz is None:
        return None
    try:
        return _finish(ops, machine, design,
                       _Draft(list(exec_choice), list(preload_choice), order, hz, source), stats)
    except (InfeasibleError, ValueError):
        return None


#: Sweeps of :func:`_refine` over the operator classes (each sweep only keeps improvements).
REFINE_SWEEPS = 3


def _refine(ops: Sequence[OpTradeoffs], machine: ElkMachine, sched: ElkSchedule) -> ElkSchedule:
    """:func:`_local_search` of ``sched``, searched on the model cut to ``SCREEN_LAYERS``
    layers when it has more (as §4.4's orders are screened; the search prices a few hundred
    whole-model estimates). The class points the search changes are carried to every
    identical layer of the whole model, and the result is kept only if the whole model's
    estimate improves, so it is never worse than ``sched``."""
    layers = reorder.detect_layers([o.key for o in ops])
    if layers is None or layers.count <= SCREEN_LAYERS:
        return _local_search(ops, machine, sched)
    small = reorder.truncate(ops, layers, SCREEN_LAYERS)
    cut = layers.start + layers.period * SCREEN_LAYERS
    kept = [i for i in range(len(ops)) if i < cut or i >= layers.end]  # small index -> op
    at = {i: j for j, i in enumerate(kept)}
    order = tuple(at[i] for i in sched.preload_order if i in at)
    ex = [sched.exec_choice[i] for i in kept]
    pc = [sched.preload_choice[i] for i in kept]
    start = _at_points(small, machine, sched.design, order, ex, pc, sched.stats.source, sched.stats)
    if start is None:
        return _local_search(ops, machine, sched)
    found = _local_search(small, machine, start)
    ex, pc = list(sched.exec_choice), list(sched.preload_choice)
    for j, i in enumerate(kept):
        if (found.exec_choice[j], found.preload_choice[j]) == (start.exec_choice[j],
                                                               start.preload_choice[j]):
            continue
        if layers.start <= i < layers.end:   # a layer position: every identical layer
            members = range(layers.start + (i - layers.start) % layers.period, layers.end,
                            layers.period)
        else:
            members = (i,)
        for m in members:
            ex[m], pc[m] = found.exec_choice[j], found.preload_choice[j]
    cand = _at_points(ops, machine, sched.design, sched.preload_order, ex, pc,
                      sched.stats.source + ", refined", sched.stats)
    return cand if cand is not None and cand.total_s < sched.total_s * (1 - 1e-9) else sched


def _local_search(ops: Sequence[OpTradeoffs], machine: ElkMachine, sched: ElkSchedule) -> ElkSchedule:
    """Improve a schedule's execute/preload points against its whole-schedule estimate.

    The recurrence (§4.2) fixes each operator's execute point in its own window and each
    preload point in the windows it is preloaded in, against window-local prices; whether a
    slower execute point with a cheaper preload pays off depends on what the whole timeline
    is bound by (HBM, links or execution), which only :func:`estimate` sees. This pass tries,
    for one class of operators at a time, every (execute, preload) point of its tables, with
    the preloads issued as early as memory allows (:func:`fitting_horizons`), and keeps a
    change when the estimate improves. A class is one operator position of the repeated
    layer, applied to all identical layers as §4.4 applies one layer's order to all (an
    operator outside the repeated layers is its own class). The start is a candidate, so the
    result is never worse on the estimate."""
    order = sched.preload_order
    layers = reorder.detect_layers([o.key for o in ops])
    classes: dict[tuple, list[int]] = {}
    for i, op in enumerate(ops):
        if sum(len(f) for f in op.preloads) + (0 if op.loads else len(op.execs)) <= 1:
            continue    # nothing to choose
        if layers is not None and layers.start <= i < layers.end:
            cls = ("layer", (i - layers.start) % layers.period)
        else:
            cls = ("op", i)
        classes.setdefault(cls, []).append(i)

    def evaluate(ex: list[int], pc: list[int], source: str) -> ElkSchedule | None:
        return _at_points(ops, machine, sched.design, order, ex, pc, source, sched.stats)

    source = sched.stats.source
    best = evaluate(list(sched.exec_choice), list(sched.preload_choice), source)
    if best is None or best.total_s >= sched.total_s:
        best = sched
    for _ in range(REFINE_SWEEPS):
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
                cand = evaluate(ex, pc, source + ", refined")
                if cand is not None and cand.total_s < best.total_s * (1 - 1e-9):
                    best, improved = cand, True
        if not improved:
            break
    return best


def _static_sweep(ops: Sequence[OpTradeoffs], machine: ElkMachine) -> list[_Draft]:
    n = len(ops)
    order = tuple(i for i, o in enumerate(ops) if o.loads)
    drafts = []
    for k in range(STATIC_SPLITS):
        reserved = machine.sram_bytes * k // STATIC_SPLITS
        ex = [_fastest_fitting(op, machine.sram_bytes - reserved) for op in ops]
        if any(e is None for e in ex):
            break       # larger reservations leave even less execution space
        for which, name in ((0, "max"), (-1, "min")):
            pc = [(len(o.preloads[ex[i]]) + which) % len(o.preloads[ex[i]]) if o.loads else -1
                  for i, o in enumerate(ops)]
            space = {j: ops[j].preloads[ex[j]][pc[j]].space for j in order}
            hz = _capacity_horizons(n, order, space, reserved)
            if hz is not None:
                drafts.append(_Draft(list(ex), pc, order, hz, f"static {k}/{STATIC_SPLITS} {name}"))
    return drafts


def _elk_inductive(ops: Sequence[OpTradeoffs], machine: ElkMachine, order: tuple[int, ...],
                   memo: dict, stretch: float | None = None) -> _Draft:
    """§4.2 + §4.3: the recurrence whose window times come from the cost-aware allocation.

    With ``stretch`` the contention is priced the way the device resolves it instead of
    inside the windows (:func:`estimate`): executions keep their own time, and every
    preload's network delivery takes ``stretch`` times its time alone (the link share the
    executions it overlaps leave, on average: :func:`_average_stretch`)."""
    n = len(ops)
    m = min_horizons(n, order)
    early = early_members(n, order, m)
    ops, offset = _joint_starts(ops, _load_price(stretch))
    ex = [0] * n
    pc = {j: 0 for j in order}
    tried: dict[int, tuple[tuple[int, ...], WindowPlan]] = {}
    window_machine = machine if stretch is None else replace(machine, separate_interconnect=True)

    scan: list = [None, []]     # the op being scanned, its members' (key, ex, pc) by position

    def window_time(i: int, h: int) -> float | None:
        # the recurrence scans h upwards for one i at a time, and ex / pc only change on commit
        members = early[i] + order[m[i]:h]
        if scan[0] != i:
            scan[0], scan[1] = i, [(ops[j].key, ex[j], pc[j]) for j in early[i]]
        items = scan[1]
        for j in members[len(items):]:
            items.append((ops[j].key, ex[j], pc[j]))
        # one greedy trajectory per window content, whatever the live bytes beside it
        key = (stretch is None, ops[i].key, tuple(items[:len(members)]))
        shrinker = memo.get(key)
        if shrinker is None:
            shrinker = memo[key] = WindowShrinker(ops[i], [(ops[j], ex[j], pc[j]) for j in members],
                                                  window_machine)
        plan = shrinker.plan(ops[i].live_bytes)
        if plan is None:
            return None
        tried[h] = (members, plan)
        return plan.time_s

    def commit(i: int, h: int) -> None:
        members, plan = tried[h]
        ex[i] = plan.exec_choice
        if i in pc:     # i's execute point is fixed: its windows start at its fastest preload
            pc[i] = fastest_preload(ops[i].preloads[ex[i]], _load_price(stretch))
        for j, c in zip(members, plan.preload_choices):
            pc[j] = c
        tried.clear()
        scan[0] = None

    def preload_time(j: int) -> float:
        return _load_price(stretch)(ops[j].preloads[ex[j]][pc[j]])

    res = inductive_schedule(n, order, window_time, preload_time, commit)
    source = "inductive" if stretch is None else f"inductive, preloads x{stretch:.2f}"
    return _Draft([e + o for e, o in zip(ex, offset)], [pc.get(i, -1) for i in range(n)], order,
                  list(res.horizon), source)


def _load_price(stretch: float | None):
    """The recurrence's preload time ``D_j`` of a preload point (Elk §4.2: the HBM roofline or
    the interconnect delivery, whichever is longer), the delivery taking ``stretch`` times its
    time alone when contention is priced on the preloads."""
    if stretch is None:
        return lambda p: p.load_s
    return lambda p: max(p.load_s, p.network_s * stretch)


def _joint_starts(ops: Sequence[OpTradeoffs], price) -> tuple[list[OpTradeoffs], list[int]]:
    """Each operator's fastest plan over its three trade-offs together (Elk §4.3 starts every
    operator at its fastest plan): the execute point with the least execution time plus the
    distribution and preload time (``price``) of its fastest preload point. An execute point
    is chosen in the operator's own window, but it also fixes the preload-state front its
    earlier windows trade off: a faster point whose shared inputs must be broadcast to more
    cores can need twice the link time to preload (or a long distribution) for a 5% faster
    execution. The larger execute points before the fastest plan are slower and larger, so
    they are dropped from the front the allocation shrinks along; returns the trimmed
    operators (keys marked, for the window memo) and how many points each lost."""
    out, offset = [], []
    for op in ops:
        if not op.loads:
            out.append(op)
            offset.append(0)
            continue

        def joint(e: int) -> float:
            front = op.preloads[e]
            c = fastest_preload(front, price)
            return op.execs[e].time_s + front[c].distribute_s + price(front[c])

        e0 = min(range(len(op.execs)), key=lambda e: (joint(e), e))
        out.append(op if e0 == 0 else replace(op, key=f"{op.key}@{e0}", execs=op.execs[e0:],
                                              preloads=op.preloads[e0:]))
        offset.append(e0)
    return out, offset


def fastest_preload(front: Sequence[PreloadPoint], price=None) -> int:
    """The preload-state point an operator's windows start from (Elk §4.3 starts every
    operator at its fastest plan): the least load plus distribution time alone, the larger
    point on ties. Both are on the operator's path: its load in the one preload queue (§4.2:
    the HBM roofline or the interconnect delivery, whichever is longer), its distribution
    before it executes. MaxPreload is not always that point: an input every chip needs in
    full is read once per chip at MaxPreload, and an input from the host link (8 GB/s a
    chip) takes 3x longer that way than chunked over the chips and redistributed on chip."""
    price = price or _load_price(None)
    return min(range(len(front)), key=lambda c: (price(front[c]) + front[c].distribute_s, c))


#: Longest average stretch of a preload's delivery considered (a link share of 5%).
MAX_STRETCH = 20.0


def _average_stretch(ops: Sequence[OpTradeoffs]) -> float:
    """How much longer a preload's network delivery takes beside the executions, on average:
    ``1 / (1 - traffic / time)`` over the model's fastest execute points (the share of link
    time the executions leave, :func:`runtime_sim.machine.stream_timing.preload_link_share`)."""
    time_s = sum(op.execs[0].time_s for op in ops)
    traffic_s = sum(op.execs[0].traffic_s for op in ops)
    share = preload_link_share(traffic_s, time_s)
    return min(MAX_STRETCH, 1.0 / share) if share > 0 else MAX_STRETCH


def _best(cands: Sequence[ElkSchedule]) -> ElkSchedule:
    return min(cands, key=lambda s: s.total_s)     # first wins ties: candidates listed by preference


def _try(ops, machine, design, draft_fn, stats) -> ElkSchedule | None:
    try:
        return _finish(ops, machine, design, draft_fn(), stats)
    except (InfeasibleError, ValueError):
        return None


def _plan_static(ops, machine, stats) -> ElkSchedule:
    cands = [s for d in _static_sweep(ops, machine)
             if (s := _try(ops, machine, "static", lambda d=d: d, stats)) is not None]
    basic = _finish(ops, machine, "static", _basic(ops, machine), stats)
    return _best(cands + [basic])


#: Link shares a preload's delivery may get beside the executions, screened as contention
#: prices (:func:`_screened_stretch`): from the whole links down by factors of sqrt(2) to
#: 1/MAX_STRETCH, i.e. stretches 1, 1.41, 2, ... The grid only has to bracket the price that
#: schedules best; the forward estimate, which resolves contention as the device does, picks.
STRETCH_GRID = tuple(2.0 ** (k / 2) for k in range(int(2 * math.log2(MAX_STRETCH)) + 1))


def _screened_stretch(ops, machine, memo, stats, rc: "_Reorder | None",
                      perm: tuple[int, ...] | None) -> float | None:
    """The contention price (preload stretch) that schedules ``perm``'s order best on the
    model truncated to ``SCREEN_LAYERS`` layers (as the orders are screened, §4.4), among
    :data:`STRETCH_GRID`; ``None`` without repeated layers.

    The average stretch of :func:`_average_stretch` is the link share the fastest execute
    points leave over the whole run, but a preload's delivery overlaps the executions the
    schedule puts beside it (distribution phases included, all link traffic), and a preload
    predicted longer is issued earlier, which is what keeps the one HBM queue busy: on
    Llama2-13B decode the best price is about twice the average."""
    if rc is None:
        return None
    n_layers = min(rc.layers.count, SCREEN_LAYERS)
    small = reorder.truncate(ops, rc.layers, n_layers)
    order = reorder.build_order(small, rc.layers, rc.groups, perm, n_layers)
    best, best_t = None, math.inf
    for stretch in STRETCH_GRID:
        try:
            total = _finish(small, machine, "elk-dyn",
                            _elk_inductive(small, machine, order, memo, stretch), stats).total_s
        except (InfeasibleError, ValueError):
            continue
        if total < best_t:
            best, best_t = stretch, total
    return best


def _stretches(ops, machine, memo, stats, rc, perm) -> list[float | None]:
    """Contention prices tried on the whole model: none (contention inside the windows),
    the run's average stretch, and the screened one."""
    out = [None, _average_stretch(ops)]
    screened = _screened_stretch(ops, machine, memo, stats, rc, perm)
    if screened is not None and screened not in out:
        out.append(screened)
    return out


def _plan_dyn(ops, machine, memo, stats) -> ElkSchedule:
    """§4.2 + §4.3 in execution order: the recurrence at each contention price, and Static's
    schedule, the best refined on the cut model (:func:`_refine`), then once more on the
    whole model (:func:`_local_search`): the cut model does not show every interaction of
    the layers (Gemma2-27B's estimate: 5.651 -> 5.524 ms per token), and one whole-model
    search of the chosen schedule costs a few seconds where one per candidate would cost
    several times that."""
    order = tuple(i for i, o in enumerate(ops) if o.loads)
    cands = []
    rc = _reorder_candidates(ops, machine, with_perms=False)
    for stretch in _stretches(ops, machine, memo, stats, rc, None):
        s = _try(ops, machine, "elk-dyn",
                 lambda st=stretch: _elk_inductive(ops, machine, order, memo, st), stats)
        if s is not None:
            cands.append(s)
    cands.append(replace(_plan_static(ops, machine, stats), design="elk-dyn"))
    return _local_search(ops, machine, _refine(ops, machine, _best(cands)))


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


def _screened(ops, machine, memo, stats) -> tuple[_Reorder | None, list[tuple[int, ...]]]:
    """Elk-Full's candidate orders: every suffix-tree order, screened on a model truncated to
    ``SCREEN_LAYERS`` layers; the ``SCREEN_TOP`` best permutations (deterministic)."""
    rc = _reorder_candidates(ops, machine)
    if rc is None:
        return None, []
    n_layers = min(rc.layers.count, SCREEN_LAYERS)
    small = reorder.truncate(ops, rc.layers, n_layers)
    scored = []
    for perm in rc.perms:
        order = reorder.build_order(small, rc.layers, rc.groups, perm, n_layers)
        try:
            draft = _elk_inductive(small, machine, order, memo)
            scored.append((_finish(small, machine, "elk-full", draft, stats).total_s, perm))
        except (InfeasibleError, ValueError):
            continue
    scored.sort(key=lambda x: x[0])
    return rc, [perm for _, perm in scored[:SCREEN_TOP]]


def _reordered_points(ops, machine, rc: _Reorder, sched: ElkSchedule) -> list[ElkSchedule]:
    """Every suffix-tree order (§4.4) with ``sched``'s execute and preload points, preloads as
    early as memory allows; the fastest, refined, if it beats ``sched`` (else nothing).

    The orders were screened with the recurrence's unrefined points on a truncated model;
    the refined points can favour another order (the screen's third best ranks first)."""
    best = sched
    for perm in (tuple(range(len(rc.groups.groups))),) + rc.perms:
        order = reorder.build_order(ops, rc.layers, rc.groups, perm)
        if order == sched.preload_order:
            continue
        source = f"reordered {perm} at the refined points of {sched.stats.source}"
        s = _at_points(ops, machine, sched.design, order, sched.exec_choice,
                       sched.preload_choice, source, sched.stats)
        if s is not None and s.total_s < best.total_s:
            best = replace(s, stats=replace(s.stats, avg_displacement=reorder.layer_displacement(perm),
                                            avg_position_displacement=reorder.order_displacement(order)))
    return [] if best is sched else [_refine(ops, machine, best)]


def _plan_full(ops, machine, memo, stats) -> ElkSchedule:
    dyn = _plan_dyn(ops, machine, memo, stats)
    rc, top = _screened(ops, machine, memo, stats)
    if rc is None:
        return replace(dyn, design="elk-full")
    refined = [replace(dyn, design="elk-full")]     # Elk-Dyn's (execution order), refined already
    for perm in top:
        order = reorder.build_order(ops, rc.layers, rc.groups, perm)
        cands = []
        for stretch in _stretches(ops, machine, memo, stats, rc, perm):
            s = _try(ops, machine, "elk-full",
                     lambda o=order, st=stretch: _elk_inductive(ops, machine, o, memo, st), stats)
            if s is not None:
                s = replace(s, stats=replace(s.stats, source=f"reordered {perm}, {s.stats.source}",
                                             avg_displacement=reorder.layer_displacement(perm),
                                             avg_position_displacement=reorder.order_displacement(order)))
                cands.append(s)
        if cands:   # each order's best, refined: refinement reranks the orders
            refined.append(_refine(ops, machine, _best(cands)))
    best = _best(refined)
    # then every order at the refined points: refinement can favour an order the screen missed
    best = _best([best] + _reordered_points(ops, machine, rc, best))
    best = _local_search(ops, machine, best)    # once on the whole model (see _plan_dyn)
    return replace(best, stats=replace(best.stats, orders_tried=1 + len(rc.perms)))


def _plan_ideal(ops, machine, memo, stats) -> ElkSchedule:
    """Ideal on every order Elk-Full may choose (in order, and every suffix-tree order: Elk-Full
    may move its refined points to any of them), so that Ideal <= Elk-Full holds order by
    order."""
    n = len(ops)
    ex = _fastest_points(ops, machine)
    pc = [len(o.preloads[ex[i]]) - 1 if o.loads else -1 for i, o in enumerate(ops)]
    space = {j: ideal_preload(ops[j])[0] for j, o in enumerate(ops) if o.loads}
    orders = [tuple(i for i, o in enumerate(ops) if o.loads)]
    rc = _reorder_candidates(ops, machine)
    if rc is not None:
        orders += [reorder.build_order(ops, rc.layers, rc.groups, p) for p in rc.perms]
    ideal_machine = replace(machine, separate_interconnect=True)
    cands = []
    for order in orders:
        hz = _capacity_horizons(n, order, space, machine.sram_bytes)
        if hz is not None:
            s = _try(ops, ideal_machine, "ideal",
                     lambda o=order, h=hz: _Draft(ex, pc, o, h, "ideal"), stats)
            if s is not None:
                cands.append(s)
    if not cands:
        raise InfeasibleError("ideal: no preload order fits")
    best = _best(cands)
    return replace(best, stats=replace(best.stats, orders_tried=len(orders)))


def plan_preloads(ops: Sequence[OpTradeoffs], machine: ElkMachine, design: str) -> ElkSchedule:
    """Plan the preloads and executions of ``ops`` (execution order) with one of ``DESIGNS``."""
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}; one of {DESIGNS}")
    t0 = time.perf_counter()
    stats = PlanStats()
    memo: dict = {}     # window allocations, shared by every order tried in this call
    if design == "basic":
        sched = _finish(ops, machine, design, _basic(ops, machine), stats)
    elif design == "static":
        sched = _plan_static(ops, machine, stats)
    elif design == "elk-dyn":
        sched = _plan_dyn(ops, machine, memo, stats)
    elif design == "elk-full":
        sched = _plan_full(ops, machine, memo, stats)
    else:
        sched = _plan_ideal(ops, machine, memo, stats)
    return replace(sched, stats=replace(sched.stats, planning_s=time.perf_counter() - t0))
