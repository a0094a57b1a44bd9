"""Departure pricing: an operator's plan chosen with its readers' arrival in view.

The region planner prices the *arrival* of a produced input in its reader's plan
(:class:`.batch_cost.ArrivalCostModel`, T10 §4.3.2's reconciliation term for activations):
``partition bytes / link bandwidth``, unless the producer left the input as blocks one per
core that the reader's plan reads in place (:class:`.batch_cost.InPlace`). What the producer
leaves is its own plan's choice, which the arrival term cannot reach: a producer planned
alone leaves its output wherever its own steps are cheapest, and every reader pays.

A :class:`Departure` is one reader's side of that bargain, taken from the reader's plan: the
blocks it reads the tensor in (an :class:`.batch_cost.InPlace` on the producer's *output*)
and the seconds its arrival costs it when they are not there (the reader's own
``ArrivalCostModel.arrival``, so both sides price a re-layout with one function).
:class:`DepartureCostModel` adds, to every plan of the producer, the departures it does not
leave in place; :func:`plan_departing` searches the producer with it, exactly (the added
term is not negative, so the base model's lower bounds still hold, and a row whose
partition cannot match a reader's blocks carries that reader's seconds in its bound too).
The region-level loop that proposes departures and keeps the ones that pay is
:mod:`tvm_icca.model_pass.departures`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from tvm_icca.plan_search.batch_cost import ArrivalCostModel, BatchCostModel, InPlace
from tvm_icca.plan_search.cost import AnalyticCostModel
from tvm_icca.plan_search.hw_fields import search_key
from tvm_icca.plan_search.mapping import Producer
from tvm_icca.plan_search.plan_space import PlanBatch
from tvm_icca.plan_search.search import (
    MAX_BUDGETS_KEPT,
    PlannedOp,
    best_plan,
    in_place_inputs,
    mapped_plan,
    optimum_within,
    raise_nothing_fits,
    search_model,
)
from tvm_icca.plan_search.search_memo import SearchMemo, cache_or_new, plan_structure
from tvm_icca.plan_search.structure import PlanStructure


@dataclass(frozen=True)
class Departure:
    """One reader's arrival of an operator's output, as the producer's search prices it.

    ``blocks`` is an :class:`.batch_cost.InPlace` on the producer's output (its ``tensor``
    is the output's index among the producer's tensors): the blocks, one per core, the
    reader's plan reads the tensor in, and on one chip the order in which the reader numbers
    them (``InPlace.order``). ``seconds`` is what the reader pays when the producer leaves
    the tensor otherwise (:meth:`.batch_cost.ArrivalCostModel.arrival` of its plan).
    """

    blocks: InPlace
    seconds: float


def reader_departure(reader: OpLayout, t: int, producer: TensorExpr, hw: HardwareSpec
                     ) -> Departure | None:
    """The :class:`Departure` of input ``t`` of the reader's plan ``reader`` for its
    producer ``producer``: ``None`` when no producer plan could leave the input where this
    plan finds it in place (the plan replicates or rotates it, reads a view or a gather of
    it, or a compound index), or when its arrival costs nothing."""
    expr = reader.expr
    access = expr.inputs[t]
    if (getattr(access, "view", None) is not None or access.gather is not None
            or tuple(access.tensor_shape) != tuple(producer.output.shape)
            or not all(i.is_simple for i in access.indices)):
        return None
    structure = plan_structure(expr)
    batch = PlanBatch.of_plan(structure, reader.plan)
    dims = structure.dims[t]
    if any(d[0] != "simple" for d in dims):
        return None
    axes = [int(d[1]) for d in dims]
    counts = tuple(int(batch.F[0, a]) for a in axes)
    block = tuple(int(batch.xp[0, a]) for a in axes)
    order = None
    if hw.num_chips <= 1:
        # the reader is not mapped afterwards: it numbers its cores row-major over its own
        # core order, which the producer's numbering must follow (InPlace.order)
        names = [i.terms[0][0] for i in access.indices]
        order = tuple(sorted(range(len(names)), key=lambda d: reader.core_order.index(names[d])))
    mine = InPlace(t, block, counts, order)
    if not ArrivalCostModel.aligned(mine, structure, batch.F, batch.xp, batch.ft)[0]:
        return None  # replicated, rotated or diagonal: no producer leaves it in place
    seconds = float(ArrivalCostModel(search_model(expr, hw), (t,), hw).arrival(batch)[0])
    if seconds <= 0:
        return None
    out = len(producer.tensors) - 1
    return Departure(InPlace(out, block, counts, order), seconds)


class DepartureCostModel:
    """A producer's batch model plus its readers' arrivals it does not leave in place.

    For every plan: ``base`` time plus the ``seconds`` of every :class:`Departure` whose
    blocks the plan's output partitions are not (:meth:`.batch_cost.ArrivalCostModel.aligned`
    on the output). Lower bounds add the departures no plan of the row can leave in place
    (its ``F_op`` already differs from the blocks' counts, or replicates the output).
    """

    def __init__(self, base: BatchCostModel, departures: Sequence[Departure]):
        self.base = base
        self.departures = tuple(departures)

    def _unmet(self, structure: PlanStructure, F: np.ndarray, xp: np.ndarray | None = None,
               ft: np.ndarray | None = None) -> np.ndarray:
        total = np.zeros(len(F))
        for d in self.departures:
            total += np.where(ArrivalCostModel.aligned(d.blocks, structure, F, xp, ft), 0.0, d.seconds)
        return total

    def times(self, batch: PlanBatch) -> tuple[np.ndarray, np.ndarray]:
        time, order = self.base.times(batch)
        return time + self._unmet(batch.structure, batch.F, batch.xp, batch.ft), order

    def time_lower_bound(self, structure: PlanStructure, F: np.ndarray) -> np.ndarray:
        return self.base.time_lower_bound(structure, F) + self._unmet(structure, F)

    def rotating_lower_bound(self, structure: PlanStructure, F: np.ndarray,
                             budget: float = math.inf) -> np.ndarray:
        return self.base.rotating_lower_bound(structure, F, budget) + self._unmet(structure, F)

    def step_lower_bound(self, structure: PlanStructure, F: np.ndarray, S: np.ndarray,
                         xp: np.ndarray, parts: np.ndarray | None = None) -> np.ndarray:
        base = getattr(self.base, "step_lower_bound", None)
        low = base(structure, F, S, xp, parts) if base is not None else self.time_lower_bound(structure, F)
        return low + self._unmet(structure, F, xp)

    def step_fixed_lower_bound(self, structure: PlanStructure, F: np.ndarray, S: np.ndarray,
                               xp: np.ndarray) -> np.ndarray:
        base = getattr(self.base, "step_fixed_lower_bound", None)
        low = base(structure, F, S, xp) if base is not None else self.time_lower_bound(structure, F)
        return low + self._unmet(structure, F, xp)


def leaves_in_place(layout: OpLayout, departure: Departure) -> bool:
    """Whether ``layout`` (the producer's plan) leaves its output where ``departure``'s
    reader finds it in place."""
    structure = plan_structure(layout.expr)
    batch = PlanBatch.of_plan(structure, layout.plan)
    return bool(ArrivalCostModel.aligned(departure.blocks, structure, batch.F, batch.xp, batch.ft)[0])


def plan_departing(expr: TensorExpr, hw: HardwareSpec, departures: Sequence[Departure],
                   budget_bytes: int, name: str | None = None, cache: SearchMemo | None = None,
                   hbm_inputs: Sequence[int] = (), producers: Sequence[Producer] = (),
                   arriving: Sequence[int] = (), output_cap: int | None = None) -> PlannedOp:
    """:func:`.search.plan_operator` (default cost model) with the readers' ``departures``
    priced: the exact fastest plan under its own time, its arriving inputs and the
    departures it does not leave in place (:class:`DepartureCostModel`), mapped to the
    chips as ``plan_operator`` maps its plans. The reported time stays the operator's own.

    Raises
    ------
    PlanNotFoundError
        No plan fits ``budget_bytes`` (departures never make a plan fit or not).
    """
    budget = int(budget_bytes)
    label = name or expr.kind
    arriving = tuple(sorted({int(t) for t in arriving}))
    departures = tuple(departures)
    cap = math.inf if output_cap is None else int(output_cap)
    in_place = in_place_inputs(producers, arriving, mapped=hw.num_chips > 1)
    memo = cache_or_new(cache)

    def search() -> PlannedOp:
        structure = plan_structure(expr, memo)
        model = DepartureCostModel(search_model(expr, hw, arriving, in_place), departures)
        best = best_plan(structure, model, budget, hw.num_cores, cache=memo, output_cap=cap)
        if best is None:
            raise_nothing_fits(structure, hw, budget, label, memo, cap)
        plan = best.plan(0)
        layout = OpLayout(expr, plan)
        return PlannedOp(expr, plan, layout, AnalyticCostModel()(layout, hw), layout.memory_bytes_per_core())

    key = ("departing", expr.structure_key(views=False), search_key(hw), arriving, in_place,
           departures, cap)
    searched = memo.planned(key) or ()
    # the pieces of a split operator see budgets that differ by what the region holds: an
    # optimum within a larger budget that fits this one is this one's (optimum_within)
    result = optimum_within(searched, budget)
    if result is None:
        result = search()
        memo.remember(key, (*searched[-MAX_BUDGETS_KEPT + 1:], (budget, result)))
    if result.expr != expr:  # same structure: this operator's tensor names
        result = dataclasses.replace(result, expr=expr, layout=OpLayout(expr, result.plan))
    return mapped_plan(result, hw, tuple(sorted(int(t) for t in hbm_inputs)), producers, cache,
                   tuple(p.tensor for p in in_place) if arriving else ())


__all__ = ["Departure", "DepartureCostModel", "leaves_in_place", "plan_departing", "reader_departure"]
