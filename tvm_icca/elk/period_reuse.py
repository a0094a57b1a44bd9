"""One period of a repeated run scheduled, and its decisions expanded to every repeat.

An LLM's run is a prefix (embedding), L identical layers and a suffix (head): the Elk designs
(:mod:`tvm_icca.elk.designs`) already choose one layer's preload order for every layer
(Elk §4.4) and refine points per layer position, but each candidate they price is a forward
estimate of the whole run (:func:`~tvm_icca.elk.elk_schedule.estimate`), and the recurrence
(§4.2) runs over every operator: the search grows with the layers. Here the design searches
a *cut* of the run instead -- the prefix, the first layer, one layer standing for every middle
one, the last layer and the suffix (:func:`cut_run`) -- and its decisions are expanded
(:func:`expand_decisions`): every middle layer takes the standing layer's execute and preload
points, and its slice of the preload order; the preloads are then issued as early as memory
allows on the whole run (:func:`~tvm_icca.elk.draft.schedule_at_points`, the designs' own
evaluation of fixed points, whose horizons are the best for those points), and the whole run
is estimated once. The search is the design's own (nothing of it is repeated here); only
which operators it sees changes, so its cost no longer depends on the layer count.

The first and last layers stay in the cut because they differ: the first follows the
prefix's operators and the last precedes the head, so their windows (§4.2) hold other
preloads. The standing layer is a middle layer whose live bytes (activations other operators
hold while it runs; a layer may hold the cache updates of the layers before it), and waiting
bytes (those held before it starts), are, per position, the most any middle layer holds, so a
window that fits for it fits for every middle layer.

Only ``elk-dyn`` and ``elk-full`` are searched on the cut (:data:`REUSE_DESIGNS`): ``basic``,
``static`` and ``ideal`` price a fixed number of candidates per run (about 1 ms of CPU per
operator on Llama2-13B decode, flat in the layers) by rules of their own for the horizons,
which an expansion would have to repeat. The cut is planned only when it matches the run in
what the designs derive from it (its repeated layers, and Elk §4.4's groups of HBM-heavy
operators, which depend on the run's average bytes); otherwise, and when the expanded points
do not fit the whole run, the whole run is searched (the schedule's source says which).
The decisions are the same as the whole run's search when the cut's interactions are the
run's (checked on small LLMs in ``tests/test_period_reuse.py`` through the timing simulator);
:attr:`tvm_icca.model_pass.CompileOptions.reuse_layers` turns this off to compare. The designs'
ranking by construction (Ideal <= Elk-Full <= Elk-Dyn <= Static on the estimate,
:mod:`tvm_icca.elk.designs`) holds on the cut; on the whole run, with Static and Ideal
searched whole, it is no longer by construction (it holds on Llama2-13B decode, 40 layers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tvm_icca.elk import reorder
from tvm_icca.elk.designs import plan_preloads, reorder_at_points
from tvm_icca.elk.draft import OnStep, schedule_at_points
from tvm_icca.elk.periods import Repeats, find_repeats
from tvm_icca.elk.refine import local_search
from tvm_icca.elk.elk_schedule import ElkSchedule
from tvm_icca.elk.tradeoffs import ElkMachine, OpTradeoffs

__all__ = ["CUT_LAYERS", "REUSE_DESIGNS", "RunCut", "cut_run", "expand_decisions",
           "plan_preloads_by_period"]

#: Layers of the cut a design searches: the first, one standing for the middle ones, the last.
CUT_LAYERS = 3
#: The designs whose search runs on the cut (the module docstring says why not the others).
REUSE_DESIGNS = ("elk-dyn", "elk-full")


@dataclass(frozen=True)
class RunCut:
    """How a cut of a run maps onto the run: ``kept[t]`` is the run's operator at the cut's
    position ``t`` (the standing layer's positions name the run's layer ``count - 2``)."""

    repeats: Repeats
    kept: tuple[int, ...]
    num_ops: int

    @property
    def middle(self) -> range:
        """The cut's positions of the layer standing for the middle ones."""
        start = self.repeats.start + self.repeats.period
        return range(start, start + self.repeats.period)

    def standing_for(self, i: int) -> int:
        """The cut's position whose decisions the run's operator ``i`` takes."""
        rep = self.repeats
        layer = rep.layer_of(i)
        if layer is None:
            return i if i < rep.start else i - rep.end + rep.start + CUT_LAYERS * rep.period
        r = (i - rep.start) % rep.period
        kept_layer = 0 if layer == 0 else (2 if layer == rep.count - 1 else 1)
        return rep.start + kept_layer * rep.period + r


def cut_run(ops: Sequence[OpTradeoffs], repeats: Repeats) -> tuple[list[OpTradeoffs], RunCut]:
    """The run cut to its prefix, first layer, a standing middle layer, last layer and suffix
    (``repeats.count > CUT_LAYERS``): the standing layer is layer ``count - 2`` with, per
    position, the most live and waiting bytes of any middle layer (module docstring)."""
    if repeats.count <= CUT_LAYERS:
        raise ValueError(f"a run of {repeats.count} layers is its own cut")
    start, period, count = repeats.start, repeats.period, repeats.count
    layer = [start + l * period for l in (0, count - 2, count - 1)]
    kept = (list(range(start)) + [b + r for b in layer for r in range(period)]
            + list(range(repeats.end, len(ops))))
    small = [ops[i] for i in kept]
    for r in range(period):
        middle = [ops[start + l * period + r] for l in range(1, count - 1)]
        live = max(o.live_bytes for o in middle)
        waiting = max(o.waiting_bytes for o in middle)
        t = start + period + r
        if (small[t].live_bytes, small[t].waiting_bytes) != (live, waiting):
            small[t] = replace(small[t], live_bytes=live, waiting_bytes=waiting)
    return small, RunCut(repeats, tuple(kept), len(ops))


def expand_decisions(cut: RunCut, sched: ElkSchedule
                     ) -> tuple[list[int], list[int], tuple[int, ...]] | None:
    """The run's execute points, preload points and preload order from the cut's schedule:
    every middle layer as the standing one, its slice of the order repeated in layer order.
    ``None`` when the standing layer's preloads are not one contiguous slice of the order
    (an order that interleaves them with another layer's has no expansion)."""
    rep = cut.repeats
    where = [cut.standing_for(i) for i in range(cut.num_ops)]
    ex = [sched.exec_choice[t] for t in where]
    pc = [sched.preload_choice[t] for t in where]
    middle = cut.middle
    slots = [k for k, t in enumerate(sched.preload_order) if t in middle]
    if slots and slots[-1] - slots[0] + 1 != len(slots):
        return None
    order: list[int] = []
    for k, t in enumerate(sched.preload_order):
        if t in middle:
            if k == slots[0]:
                for layer in range(1, rep.count - 1):
                    base = rep.start + layer * rep.period
                    order.extend(base + sched.preload_order[s] - middle.start for s in slots)
        else:
            order.append(cut.kept[t])
    return ex, pc, tuple(order)


def plan_preloads_by_period(ops: Sequence[OpTradeoffs], machine: ElkMachine, design: str, *,
                            on_step: OnStep = None, group_pieces: bool = True) -> ElkSchedule:
    """:func:`~tvm_icca.elk.designs.plan_preloads` of ``ops`` with ``design``, its search run
    on the cut of the run's repeated layers and expanded (module docstring) when the design is
    one of :data:`REUSE_DESIGNS` and the run has more than :data:`CUT_LAYERS` identical
    layers; otherwise (or when the cut does not stand for the run) the whole run's search.
    ``group_pieces``: as for :func:`~tvm_icca.elk.designs.plan_preloads`."""
    repeats = find_repeats([o.key for o in ops]) if design in REUSE_DESIGNS else None
    if repeats is None or repeats.count <= CUT_LAYERS:
        return plan_preloads(ops, machine, design, on_step=on_step, group_pieces=group_pieces)
    small, cut = cut_run(ops, repeats)
    why = _cut_differs(ops, small, cut)
    if why is None:
        finalists: list[ElkSchedule] = []
        plan_preloads(small, machine, design, on_step=on_step, group_pieces=group_pieces,
                      finalists=finalists)
        sched, why = _best_expanded(ops, machine, design, cut, finalists, on_step)
        if sched is not None:
            # the designs' last step, on the whole run: the cut weighs a middle layer's
            # change against its boundaries once, the run (count - 2) times (on Llama2-13B
            # decode it moves the layers' last operator to its second point, 0.4% faster)
            # The cut's search set tied positions apart already (the run's layers are
            # its layer), so the run's pass moves whole classes only: splitting them again
            # over every layer costs more than a third of a pieced run's search
            if design == "elk-full":
                sched = reorder_at_points(ops, machine, sched, on_step=on_step,
                                          group_pieces=group_pieces)
            sched = local_search(ops, machine, sched, on_step, group_pieces=group_pieces,
                                 split_tied=False)
            return replace(sched, stats=replace(
                sched.stats,
                avg_position_displacement=reorder.order_displacement(sched.preload_order)))
    whole = plan_preloads(ops, machine, design, on_step=on_step, group_pieces=group_pieces)
    return replace(whole, stats=replace(whole.stats,
                                        source=f"{whole.stats.source} (whole run: {why})"))


def _best_expanded(ops: Sequence[OpTradeoffs], machine: ElkMachine, design: str, cut: RunCut,
                   finalists: Sequence[ElkSchedule], on_step: OnStep
                   ) -> tuple[ElkSchedule | None, str]:
    """The fastest on the whole run of the cut's ``finalists`` expanded (the design's choice
    first: it wins ties), or None and why none is a schedule of the run.

    The cut weighs the layer standing for the middle ones once against its boundaries (the
    prefix, the first and last layers, the suffix); the run weighs it ``count - 2`` times, so
    the cut's ranking of the design's candidates is not the run's: a preload order that
    gains in every middle layer and loses at the boundaries ranks last on the cut and first
    on the run (Gemma2-27B decode on 4,416 cores, Elk Fig. 23: Elk-Full's reordered
    schedule, slower than Static's refined points on the cut, 7.34 against 7.52 ms on the run)."""
    why = "the cut's preload order interleaves its layers"
    best: ElkSchedule | None = None
    tried: set[tuple] = set()
    rep = cut.repeats
    for found in finalists:
        expanded = expand_decisions(cut, found)
        if expanded is None:
            continue
        ex, pc, order = expanded
        if (tuple(ex), tuple(pc), order) in tried:
            continue
        tried.add((tuple(ex), tuple(pc), order))
        source = (f"{found.stats.source}; one period of {rep.count} layers planned "
                  f"({len(cut.kept)} of {len(ops)} operators) and expanded")
        sched = schedule_at_points(ops, machine, design, order, ex, pc, source, found.stats,
                                   on_step, stop_at=best.total_s if best else math.inf)
        if sched is None:
            why = "the expanded points do not fit the whole run"
        elif best is None or sched.total_s < best.total_s:
            best = sched
    return best, why


def _cut_differs(ops: Sequence[OpTradeoffs], small: Sequence[OpTradeoffs],
                 cut: RunCut) -> str | None:
    """Why the designs would see another layer structure on the cut than on the run (None:
    they see the same): its repeated layers, or Elk §4.4's groups of heavy operators."""
    rep = cut.repeats
    small_rep = find_repeats([o.key for o in small])
    if small_rep != Repeats(rep.start, rep.period, CUT_LAYERS):
        return "the cut repeats otherwise"
    if reorder.layer_groups(small, small_rep) != reorder.layer_groups(ops, rep):
        return "the cut's heavy operators differ"
    return None
