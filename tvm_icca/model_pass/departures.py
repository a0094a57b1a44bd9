"""Departure pricing over a region: producers planned again with their readers in view.

The region planner (:func:`~tvm_icca.model_pass.region_plans.plan_region`) plans operators in
order; in a compute-bound region each prices the arrival of its produced inputs in its own
partitions (:class:`~tvm_icca.plan_search.batch_cost.ArrivalCostModel`). The producer, planned
first, never sees what its layout costs its readers. :func:`improve_departures` closes that
loop after the region is planned:

1. every reader that pays the arrival of an input an earlier operator produced, in a plan
   that reads it one block per core, names the producer a
   :class:`~tvm_icca.plan_search.departure.Departure` (those blocks, and what their absence
   costs it);
2. producers with the same structure and the same departures (the pieces of one split
   operator, the identical layers of one region) form a group; groups are tried with the
   most departure seconds first;
3. a group whose first producer, searched with its departures, would leave none of them
   in place is dropped; otherwise a trial plans the whole region again with the group's
   producers searched by their own time plus the departures they do not leave in place
   (:func:`~tvm_icca.plan_search.departure.plan_departing`), and the readers re-planned
   against the new layouts; it is kept only if the region's estimated time
   (:func:`region_estimate`: every operator's own time and arrivals, the search's own
   objective) drops.

Only compute-bound regions get here (where arrival is priced: in an HBM-bound region Elk
hides re-layouts under the loads, Elk §4.2); each trial costs one region planning, whose
unchanged operators are answered by the plan cache, and at most :data:`MAX_TRIALS` run.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.program import OpProgram
from tvm_icca.lower.region import RegionOps
from tvm_icca.plan_search.batch_cost import ArrivalCostModel
from tvm_icca.plan_search.departure import (
    Departure,
    leaves_in_place,
    plan_departing,
    reader_departure,
)
from tvm_icca.plan_search.plan_space import PlanBatch
from tvm_icca.plan_search.search import in_place_inputs, search_model
from tvm_icca.plan_search.search_memo import SearchMemo, plan_structure

logger = logging.getLogger(__name__)

#: Region plannings :func:`improve_departures` may spend on trials. A one-layer Llama2-13B
#: prefill has a handful of producer groups whose readers pay an arrival; each trial plans
#: the region again (mostly plan-cache hits), so this bounds the compile time it adds.
MAX_TRIALS = 12

#: Relative drop of the region's estimated time a trial must bring to be kept: below it,
#: rounding in the sums could keep a change that gains nothing.
MIN_GAIN = 1e-6

#: A region's plans and budgets, as :func:`~tvm_icca.model_pass.region_plans.plan_region`
#: returns them.
Planned = tuple[list[OpProgram], list[int]]


def _contexts(region: RegionOps, ops: list[OpProgram], hw: HardwareSpec,
              hbm_names: frozenset[str]):
    """Per operator: its layout, its produced inputs ``(t, layout)``, its arriving inputs and
    those its producers left in place, as :func:`plan_region` searched it (every produced
    input arrives: the region is compute-bound)."""
    layouts: dict[str, OpLayout] = {}
    out = []
    for pending, op in zip(region.ops, ops):
        out.append(_context(pending, op, layouts, hw, hbm_names))
        layouts[pending.output_name] = out[-1][0]
    return out


def _context_of(region: RegionOps, ops: list[OpProgram], hw: HardwareSpec,
                hbm_names: frozenset[str], i: int):
    """``_contexts(region, ops, hw, hbm_names)[i]``, from the layouts of operator ``i``'s
    producers alone (a trial asks for one operator's context; the region's others would
    each find their producers' output grids again)."""
    pending = region.ops[i]
    wanted = set(pending.input_names)
    last = {p.output_name: k for k, p in enumerate(region.ops[:i]) if p.output_name in wanted}
    layouts = {n: OpLayout(ops[k].expr, ops[k].plan, hw.cores_per_chip) for n, k in last.items()}
    return _context(pending, ops[i], layouts, hw, hbm_names)


def _context(pending, op: OpProgram, layouts: Mapping[str, OpLayout], hw: HardwareSpec,
             hbm_names: frozenset[str]):
    """One operator's entry of :func:`_contexts`, its producers' layouts by output name."""
    producers = tuple((t, layouts[n]) for t, n in enumerate(pending.input_names)
                      if n in layouts and n not in hbm_names)
    arriving = tuple(t for t, _ in producers)
    in_place = in_place_inputs(producers, arriving, mapped=hw.num_chips > 1)
    return OpLayout(op.expr, op.plan, hw.cores_per_chip), producers, arriving, in_place


def region_estimate(region: RegionOps, ops: list[OpProgram], hw: HardwareSpec,
                    hbm_names: frozenset[str], memo: SearchMemo | None = None) -> float:
    """Seconds the region's plans take by the measure each was searched with
    (:func:`~tvm_icca.plan_search.search.search_model`): every operator's own steps plus the
    arrival of its produced inputs, those found in place free."""
    total = 0.0
    for op, (_, _, arriving, in_place) in zip(ops, _contexts(region, ops, hw, hbm_names)):
        batch = PlanBatch.of_plan(plan_structure(op.expr, memo), op.plan)
        total += float(search_model(op.expr, hw, arriving, in_place).times(batch)[0][0])
    return total


def wanted_departures(region: RegionOps, ops: list[OpProgram], hw: HardwareSpec,
                      hbm_names: frozenset[str], memo: SearchMemo | None = None
                      ) -> dict[str, tuple[Departure, ...]]:
    """Producer name -> the :class:`Departure` s of its readers that pay its output's arrival
    (step 1 of the module doc)."""
    producer_of = {p.output_name: i for i, p in enumerate(region.ops)}
    wanted: dict[str, list[Departure]] = {}
    for pending, op, (layout, _, arriving, in_place) in zip(
            region.ops, ops, _contexts(region, ops, hw, hbm_names)):
        batch = PlanBatch.of_plan(plan_structure(op.expr, memo), op.plan)
        for t in arriving:
            paid = ArrivalCostModel(search_model(op.expr, hw), (t,), hw, in_place=in_place)
            if paid.arrival(batch)[0] <= 0:
                continue  # found in place already
            producer = region.ops[producer_of[pending.input_names[t]]]
            departure = reader_departure(layout, t, producer.expr, hw)
            if departure is not None:
                wanted.setdefault(producer.name, []).append(departure)
    return {name: tuple(d) for name, d in wanted.items()}


def departure_groups(region: RegionOps, wanted: Mapping[str, tuple[Departure, ...]]
                     ) -> list[dict[str, tuple[Departure, ...]]]:
    """The producers of ``wanted`` grouped by structure and departures (step 2), most
    departure seconds first."""
    exprs = {op.name: op.expr for op in region.ops}
    groups: dict[tuple, dict[str, tuple[Departure, ...]]] = {}
    for name, departures in wanted.items():
        key = (exprs[name].structure_key(views=False), tuple(d.blocks for d in departures))
        groups.setdefault(key, {})[name] = departures
    return sorted(groups.values(),
                  key=lambda g: -sum(d.seconds for ds in g.values() for d in ds))


def _may_depart(region: RegionOps, planned: Planned, hw: HardwareSpec,
                hbm_names: frozenset[str], group: Mapping[str, tuple[Departure, ...]],
                caps: Mapping[str, int], memo: SearchMemo | None) -> bool:
    """Whether the group's first producer, searched with its departures in the context and
    budget it has now, leaves some of them in place: a trial whose producers would keep
    their layouts cannot change the region, so it is not planned. (The search is memoized:
    the trial that follows finds it.)"""
    name = next(iter(group))
    i = next(k for k, op in enumerate(region.ops) if op.name == name)
    layout, producers, arriving, _ = _context_of(region, planned[0], hw, hbm_names, i)
    op = region.ops[i]
    hbm = tuple(t for t, n in enumerate(op.input_names) if n in hbm_names)
    try:
        searched = plan_departing(op.expr, hw, group[name], planned[1][i], op.describe(), memo,
                                  hbm, producers, arriving, caps.get(name))
    except PlanNotFoundError:
        return False
    return any(leaves_in_place(searched.layout, d) and not leaves_in_place(layout, d)
               for d in group[name])


def improve_departures(region: RegionOps, hw: HardwareSpec, hbm_names: frozenset[str],
                       first: Planned,
                       plan: Callable[[Mapping[str, tuple[Departure, ...]]], Planned],
                       memo: SearchMemo | None = None, caps: Mapping[str, int] | None = None
                       ) -> Planned:
    """The region's plans after departure pricing (module doc): ``first`` is the region as
    planned without departures; ``plan(departures)`` plans it again with them; ``caps``:
    the output caps it plans with (``plan_region(spread_held=True)``). Returns ``first``
    unless some trial's estimate beats it."""
    caps = caps or {}
    best = first
    best_s = region_estimate(region, first[0], hw, hbm_names, memo)
    accepted: dict[str, tuple[Departure, ...]] = {}
    tried: set[tuple] = set()
    trials = 0
    while trials < MAX_TRIALS:
        kept = False
        for group in departure_groups(region, wanted_departures(region, best[0], hw, hbm_names, memo)):
            key = tuple(sorted(group.items(), key=lambda item: item[0]))
            if key in tried:
                continue
            if trials >= MAX_TRIALS:
                break
            tried.add(key)
            if not _may_depart(region, best, hw, hbm_names, group, caps, memo):
                logger.debug("departures of %d operator(s) %s... (%.3g s): none left in place",
                             len(group), sorted(group)[:1],
                             sum(d.seconds for ds in group.values() for d in ds))
                continue
            trials += 1
            departures = {**accepted, **group}
            start = time.perf_counter()
            try:
                trial = plan(departures)
            except PlanNotFoundError:
                logger.debug("departures of %s: a later operator has no plan", sorted(group))
                continue  # the new layouts leave a later operator no plan: keep the old ones
            trial_s = region_estimate(region, trial[0], hw, hbm_names, memo)
            logger.debug("departures of %d operator(s) %s...: region %.6g -> %.6g s "
                         "(trial planned in %.1f s)", len(group), sorted(group)[:2], best_s,
                         trial_s, time.perf_counter() - start)
            if trial_s < best_s * (1 - MIN_GAIN):
                best, best_s, accepted, kept = trial, trial_s, departures, True
                break  # the readers changed: ask them again
        if not kept:
            break
    return best
