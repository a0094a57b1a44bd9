"""Refinement of a schedule's points against the whole-schedule estimate (Elk §4.2-§4.4).

The recurrence (§4.2 with §4.3's allocation) and Static's sweep choose points against
window-local prices; Elk-Dyn and Elk-Full then refine their best candidate here:
:func:`local_search` tries, per operator class (one position of the repeated layer, as §4.4
applies one layer's order to every layer), every (execute, preload) point with preloads as
early as memory allows (:func:`tvm_icca.elk.draft.schedule_at_points`), keeping only what the
forward estimate (:func:`tvm_icca.elk.elk_schedule.estimate`) improves; :func:`refine` runs that
search on the model cut to :data:`SCREEN_LAYERS` layers and carries it to the whole model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tvm_icca.elk import reorder
from tvm_icca.elk.draft import OnStep, schedule_at_points
from tvm_icca.elk.elk_schedule import ElkSchedule
from tvm_icca.elk.periods import representatives
from tvm_icca.elk.tradeoffs import ElkMachine, OpTradeoffs

#: Layers of the truncated model the points are searched on; the designs screen their candidate
#: orders and contention prices on the same cut (:mod:`tvm_icca.elk.designs`).
SCREEN_LAYERS = 3

#: Sweeps of :func:`refine` over the operator classes (each sweep only keeps improvements).
REFINE_SWEEPS = 3


@dataclass
class Evaluations:
    """The candidates :func:`local_search` estimated on one operator sequence, kept across
    its calls: a design refines several schedules of the same operators, and a search that
    starts at a schedule an earlier one left (Elk-Dyn refines its best, then searches once
    more on the whole model) re-tries candidates against the same bar, with the same answer.
    A candidate is its schedule's points, order, design, source and stats."""

    ops: Sequence[OpTradeoffs]
    found: dict[tuple, tuple[float, ElkSchedule | None]] = field(default_factory=dict)

    def of(self, ops: Sequence[OpTradeoffs]) -> dict[tuple, tuple[float, ElkSchedule | None]]:
        """The memo for ``ops``: this one's if they are its operators, else a new one."""
        return self.found if ops is self.ops else {}


def refine(ops: Sequence[OpTradeoffs], machine: ElkMachine, sched: ElkSchedule,
           on_step: OnStep = None, *, group_pieces: bool = True,
           evaluations: Evaluations | None = None) -> ElkSchedule:
    """:func:`local_search` of ``sched``, searched on the model cut to ``SCREEN_LAYERS``
    layers when it has more (as §4.4's orders are screened; the search prices a few hundred
    whole-model estimates). The class points the search changes are carried to every
    identical layer of the whole model, and the result is kept only if the whole model's
    estimate improves, so it is never worse than ``sched``. ``on_step``: told of every
    schedule estimated (:data:`~tvm_icca.elk.draft.OnStep`). ``group_pieces`` and
    ``evaluations``: as for :func:`local_search`."""
    layers = reorder.detect_layers([o.key for o in ops])
    if layers is None or layers.count <= SCREEN_LAYERS:
        return local_search(ops, machine, sched, on_step, group_pieces=group_pieces,
                            evaluations=evaluations)
    small = reorder.truncate(ops, layers, SCREEN_LAYERS)
    cut = layers.start + layers.period * SCREEN_LAYERS
    kept = [i for i in range(len(ops)) if i < cut or i >= layers.end]  # small index -> op
    at = {i: j for j, i in enumerate(kept)}
    order = tuple(at[i] for i in sched.preload_order if i in at)
    ex = [sched.exec_choice[i] for i in kept]
    pc = [sched.preload_choice[i] for i in kept]
    start = schedule_at_points(small, machine, sched.design, order, ex, pc, sched.stats.source,
                               sched.stats, on_step)
    if start is None:
        return local_search(ops, machine, sched, on_step, group_pieces=group_pieces,
                            evaluations=evaluations)
    found = local_search(small, machine, start, on_step, group_pieces=group_pieces)
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
    bar = sched.total_s * (1 - 1e-9)    # what the refined schedule must beat
    cand = schedule_at_points(ops, machine, sched.design, sched.preload_order, ex, pc,
                              sched.stats.source + ", refined", sched.stats, on_step, stop_at=bar)
    return cand if cand is not None and cand.total_s < bar else sched


def local_search(ops: Sequence[OpTradeoffs], machine: ElkMachine,
                 sched: ElkSchedule, on_step: OnStep = None, *,
                 group_pieces: bool = True, split_tied: bool = True,
                 evaluations: Evaluations | None = None) -> ElkSchedule:
    """Improve a schedule's execute/preload points against its whole-schedule estimate.

    The recurrence (§4.2) fixes each operator's execute point in its own window and each
    preload point in the windows it is preloaded in, against window-local prices; whether a
    slower execute point with a cheaper preload pays off depends on what the whole timeline
    is bound by (HBM, links or execution), which only
    :func:`~tvm_icca.elk.elk_schedule.estimate` sees. This pass tries,
    for one class of operators at a time, every (execute, preload) point of its tables, with
    the preloads issued as early as memory allows
    (:func:`~tvm_icca.elk.draft.fitting_horizons`), and keeps a
    change when the estimate improves. A class is one operator position of the repeated
    layer, applied to all identical layers as §4.4 applies one layer's order to all (an
    operator outside the repeated layers is its own class). The start is a candidate, so the
    result is never worse on the estimate. ``on_step``: told of every schedule estimated.

    ``group_pieces``: a class is every operator at one position of the nested repeats
    (:func:`~tvm_icca.elk.periods.representatives`): a long prompt's layer repeats the pieces
    of its split operators, and each piece position would otherwise be a class of its own,
    each candidate priced on the whole run -- a search quadratic in the pieces (a 32K-token
    Llama2-13B prefill has about 1,400 operators per layer). Such a class also ties a
    layer's identical operators (OPT's q/k/v projections), so a second search splits every
    tied class into its first position, its last and those between (:func:`_boundary_split`).
    ``False``: one class per layer position (and per operator outside the layers).
    ``split_tied``: with ``group_pieces``, whether the second search runs. Where the layer
    positions are no more classes than the grouped search and its split together (no pieces
    to group), the layer-position search runs as well and the faster result is kept.
    ``evaluations``:
    the candidates earlier searches of the same operators estimated (:class:`Evaluations`)."""
    keys = [o.key for o in ops]
    layers = reorder.detect_layers(keys)
    fine = _classes(ops, layers, None)
    seen = evaluations.of(ops) if evaluations is not None else {}
    if not group_pieces:
        return _sweep(ops, machine, sched, fine, on_step, seen)
    coarse = _classes(ops, layers, representatives(keys))
    # A coarse class ties positions a layer-position class would set apart: a layer's
    # identical projections as well as its pieces, and the first of them sees another
    # context (its preload window opens after another operator) than the middle ones or the
    # last. Sweep each such class split in three, its first position, its last, and the
    # ones between, from the coarse optimum: never worse on the estimate than the coarse
    # search, and (with three sub-classes at most per class) linear in the operators as it is.
    split = _boundary_split(coarse, fine) if split_tied else []
    best = _sweep(ops, machine, sched, coarse, on_step, seen)
    if split:
        best = _sweep(ops, machine, best, split, on_step, seen)
    if len(fine) <= len(coarse) + len(split):
        # Grouping saves no class here (a decode's layer ties only its identical projections
        # and an output head's few pieces), so the layer-position search, which prices no
        # more classes, runs too and the faster wins (it first, on a tie): the two greedy
        # paths differ, either way round. Gemma2-27B decode on 4,416 cores (Elk Fig. 23):
        # Elk-Full's best order refined 7.34 ms by layer position, 7.47 ms grouped and split
        fine_best = _sweep(ops, machine, sched, fine, on_step, seen)
        if fine_best.total_s <= best.total_s:
            best = fine_best
    return best


def _boundary_split(coarse: list[list[int]], fine: list[list[int]]) -> list[list[int]]:
    """Every class of ``coarse`` made of more than one class of ``fine`` (a refinement of
    it), split into the fine class that comes first, the one that comes last, and the union
    of those between (fewer when there are fewer)."""
    owner = {i: k for k, members in enumerate(coarse) for i in members}
    parts: dict[int, list[list[int]]] = {}
    for members in fine:
        parts.setdefault(owner[members[0]], []).append(members)
    split: list[list[int]] = []
    for subs in parts.values():
        if len(subs) < 2:
            continue
        subs.sort(key=lambda m: m[0])
        between = sorted(i for m in subs[1:-1] for i in m)
        split.extend(g for g in (subs[0], between, subs[-1]) if g)
    return split


def _classes(ops: Sequence[OpTradeoffs], layers: reorder.LayerStructure | None,
             rep: list[int] | None) -> list[list[int]]:
    """The operators :func:`local_search` moves together, per class: by representative
    (``rep``), else by layer position (an operator outside the layers is its own class);
    operators with one point only are left out."""
    classes: dict[tuple, list[int]] = {}
    for i, op in enumerate(ops):
        if sum(len(f) for f in op.preloads) + (0 if op.loads else len(op.execs)) <= 1:
            continue    # nothing to choose
        if rep is not None:
            cls = ("rep", rep[i])
        elif layers is not None and layers.start <= i < layers.end:
            cls = ("layer", (i - layers.start) % layers.period)
        else:
            cls = ("op", i)
        classes.setdefault(cls, []).append(i)
    return list(classes.values())


def _sweep(ops: Sequence[OpTradeoffs], machine: ElkMachine, sched: ElkSchedule,
           classes: list[list[int]], on_step: OnStep,
           seen: dict[tuple, tuple[float, ElkSchedule | None]]) -> ElkSchedule:
    """Up to :data:`REFINE_SWEEPS` sweeps over ``classes``, each class set to every point of
    its tables in turn, keeping what improves the whole-schedule estimate; ``seen``: the
    candidates estimated so far (:class:`Evaluations`)."""
    order = sched.preload_order
    # A sweep after the last improvement of the one before re-tries, against the same best,
    # the candidates that sweep tried after it: the same points and bar give the same answer.

    def evaluate(ex: list[int], pc: list[int], source: str, bar: float) -> ElkSchedule | None:
        # a candidate only counts if it beats ``bar``: its estimate stops once it cannot
        key = (sched.design, order, tuple(ex), tuple(pc), source, sched.stats)
        hit = seen.get(key)
        # a timeline estimated is the same whatever bar it was estimated against, and one
        # proven no faster than a bar is no faster than a lower one
        if hit is not None and (hit[1] is not None or bar <= hit[0]):
            return hit[1]
        found = schedule_at_points(ops, machine, sched.design, order, ex, pc, source, sched.stats,
                                   on_step, stop_at=bar)
        seen[key] = (bar, found)
        return found

    source = sched.stats.source
    refined = source if source.endswith(", refined") else source + ", refined"
    best = evaluate(list(sched.exec_choice), list(sched.preload_choice), source, sched.total_s)
    if best is None or best.total_s >= sched.total_s:
        best = sched
    for _ in range(REFINE_SWEEPS):
        improved = False
        for members in classes:
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
                cand = evaluate(ex, pc, refined, bar)
                if cand is not None and cand.total_s < bar:
                    best, improved = cand, True
        if not improved:
            break
    return best
