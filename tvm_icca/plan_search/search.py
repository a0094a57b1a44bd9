"""Choosing execution plans of one operator (T10 §4.3.1), exactly.

Every search here runs over the complete plan space of :mod:`.plan_space` (optionally cut by
T10's search constraints, :class:`PlanFilters`) and is exact for the cost model it is given:
it returns what scoring every valid plan would return, without scoring them all.

Branch and bound over ``F_op``: a batch cost model bounds the time of every plan of an
``F_op`` row from below (the unpadded, unrotated sub-operator's compute plus one
synchronization, :mod:`.batch_cost`), and :func:`.bounds.memory_lower_bound` bounds its
memory. The unrotated plan of every row is scored first (one plan per row, all rows at
once); rows are then expanded into their temporal-factor assignments in order of their
bound for rotating plans, until the bound reaches the best time found. Rows whose memory
bound exceeds the budget are never expanded.

:func:`plan_operator` keeps its first-stage interface (``PlannedOp``) and is now the exact
minimum-time plan under the budget for the analytic cost model (tests check it against brute
force through :meth:`OpLayout.validate`). On several chips it then weighs the bytes plans send
across chips (:func:`_chip_aware`): among the optimum and the fastest plans of the fastest
F_op rows (:func:`fastest_rows`), the least time plus inter-chip seconds wins.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from runtime_sim.contract.errors import PlanNotFoundError, operator_subject
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.relayout import producer_grid
from tvm_icca.plan_search.batch_cost import (
    AnalyticBatchModel,
    ArrivalCostModel,
    BatchCostModel,
    InPlace,
    in_place_rows,
)
from tvm_icca.plan_search.bounds import (
    memory_lower_bound,
    partition_lower_bounds,
    step_partition_lower_bounds,
)
from tvm_icca.plan_search.chip_capacity import budget_note, check_fits_chip
from tvm_icca.plan_search.cost import AnalyticCostModel, CostModel, PlanCost
from tvm_icca.plan_search.filters import PlanFilters
from tvm_icca.plan_search.hw_fields import placement_key, search_key
from tvm_icca.plan_search.intmath import ceil_div
from tvm_icca.plan_search.mapping import (
    Placement,
    Producer,
    best_placement,
    pick_placement,
    placement_bytes,
    producer_key,
    producer_numbering,
)
from tvm_icca.plan_search.plan_space import PlanBatch, StepCaps, StepFilter, plans_for
from tvm_icca.plan_search.scoring import (
    CHUNK_PLANS,
    ScoredPlans,
    candidate_partitions,
    max_padding,
    pareto_front,
    plan_chunks,
    score,
    unrotated,
)
from tvm_icca.plan_search.search_memo import SearchMemo, cache_or_new, plan_structure
from tvm_icca.plan_search.structure import PlanStructure

#: Relative slack of comparisons with a step lower bound: a model may compute a plan's
#: time in another order than its bound (:class:`.batch_cost.ArrivalCostModel` swaps the
#: reduction term), so the bound can exceed the time by rounding.
BOUND_SLACK = 1e-6


@dataclass(frozen=True)
class PlannedOp:
    """The plan :func:`plan_operator` chose for an operator, its layout and its estimated cost.

    Attributes
    ----------
    expr : TensorExpr
        The operator's tensor expression.
    plan : ExecutionPlan
        The chosen compute-shift plan: F_op, the tensors' temporal factors f_t, the loop order
        (T10 §4.2).
    layout : OpLayout
        What the plan means on the cores: partitions, rotation rings, steps.
    cost : PlanCost
        The cost model's estimate, by component (compute, shifts, synchronization, ...).
    memory_bytes_per_core : int
        Bytes of tensor partitions each core holds while the operator runs (the shift buffer
        not included).
    """

    expr: TensorExpr
    plan: ExecutionPlan
    layout: OpLayout
    cost: PlanCost
    memory_bytes_per_core: int

    @property
    def time_s(self) -> float:
        """The estimated execution time in seconds (``cost.time_s``)."""
        return self.cost.time_s


# -- exact searches --------------------------------------------------------------------------
def best_plan(structure: PlanStructure, model: BatchCostModel, budget: float, max_cores: int,
              filters: PlanFilters | None = None,
              cache: SearchMemo | None = None, output_cap: float = math.inf) -> ScoredPlans | None:
    """The minimum-time plan fitting ``budget`` bytes per core (exact), or None;
    ``output_cap``: the most bytes per core its output's partition may take."""
    cache = cache_or_new(cache)
    F, bound = _rows_and_bounds(structure, model, max_cores, filters, output_cap, cache)
    if not len(F):
        return None
    by_bound = np.argsort(bound, kind="stable")
    best: ScoredPlans | None = None
    best_time = math.inf
    # Unrotated plans first (one per row), best bounds first, until the bound passes the
    # incumbent: on a roomy budget that incumbent is already close to the optimum. Then the
    # rotating plans of the rows whose (weaker) bound beats it.
    for scored in _pruned_scores(structure, model, F, bound, by_bound, budget, filters,
                                 output_cap, cache, lambda: best_time, rotating=True):
        found = _argmin(scored)
        if found is not None and (best is None or _better(found, best)):
            best, best_time = found, float(found.time[0])
    return best


def _rows_key(structure: PlanStructure, max_cores: int, filters: PlanFilters | None) -> tuple:
    return (structure.expr.structure_key(views=False), int(max_cores), filters)


def _candidate_rows(structure: PlanStructure, max_cores: int, filters: PlanFilters | None,
                    cache: SearchMemo) -> np.ndarray:
    """:func:`.scoring.candidate_partitions`, kept in ``cache`` (read-only)."""
    return cache.row_arrays(("rows",) + _rows_key(structure, max_cores, filters),
                            lambda: candidate_partitions(structure, max_cores, filters))


def _rows_and_bounds(structure: PlanStructure, model: BatchCostModel, max_cores: int,
                     filters: PlanFilters | None, output_cap: float,
                     cache: SearchMemo) -> tuple[np.ndarray, np.ndarray]:
    """The candidate F_op rows (:func:`.scoring.candidate_partitions`, those whose output
    partition can stay within ``output_cap``) and the model's ``time_lower_bound`` of each.
    Both are kept in ``cache`` (:meth:`.search_memo.SearchMemo.row_arrays`) before the cap,
    the bounds under the model's ``bound_key`` (none: not kept): an operator's search and
    its chip-aware shortlist (:func:`fastest_rows`) read the same, and so do identical
    operators within other budgets (on 5,888 cores, half a million rows: about 1 s each)."""
    F = _candidate_rows(structure, max_cores, filters, cache)
    rows_key = _rows_key(structure, max_cores, filters)
    model_key = getattr(model, "bound_key", None)
    if not len(F):
        bound = np.zeros(0)
    elif model_key is None:
        bound = model.time_lower_bound(structure, F)
    else:
        bound = cache.row_arrays(("row bounds", model_key) + rows_key,
                                 lambda: np.asarray(model.time_lower_bound(structure, F), float))
    keep = _output_within(structure, F, output_cap)
    return (F, bound) if keep is None else (F[keep], bound[keep])


def _output_within(structure: PlanStructure, F: np.ndarray, output_cap: float) -> np.ndarray | None:
    """Which F_op rows can keep their output partition within ``output_cap`` bytes per core
    (None: every row, and the caller keeps its arrays, the memo's, uncopied)."""
    if not (math.isfinite(output_cap) and len(F)):
        return None
    return partition_lower_bounds(structure, F)[:, -1] <= output_cap


def _pruned_scores(structure: PlanStructure, model: BatchCostModel, F: np.ndarray,
                   bound: np.ndarray, by_bound: np.ndarray, budget: float,
                   filters: PlanFilters | None, output_cap: float, cache: SearchMemo,
                   limit: Callable[[], float], rotating: bool,
                   rotating_groups: int | None = None) -> Iterator[ScoredPlans]:
    """The branch and bound of the exact searches (:func:`best_plan`, :func:`fastest_rows`):
    scored batches of the plans that can beat ``limit()``, read again before every batch
    (the caller tightens it as it absorbs what it is given). First the unrotated plan of
    each row by ``bound`` (the model's ``time_lower_bound`` of ``F``, ``by_bound`` its
    order), chunk by chunk while the bound beats the limit; then, if ``rotating``, the
    rotating plans of the rows whose memory and rotating bounds allow them, best bound
    first, their (row, steps) pairs filtered by :func:`steps_within`; ``rotating_groups``:
    at most this many of :func:`.scoring.plan_chunks`' groups of them (no longer exact: the
    rows with the best rotating bounds only)."""
    for start in range(0, len(by_bound), CHUNK_PLANS):
        rows = by_bound[start:start + CHUNK_PLANS]
        rows = rows[bound[rows] < limit()]
        if not len(rows):
            break
        rows = rows[memory_lower_bound(structure, F[rows]) <= budget]
        yield score(unrotated(structure, F[rows]), model, budget, filters, output_cap)
    if not rotating:
        return
    rows = by_bound[: int(np.searchsorted(bound[by_bound], limit(), side="left"))]
    rows = rows[memory_lower_bound(structure, F[rows]) <= budget]
    rot_bound = model.rotating_lower_bound(structure, F[rows], budget)
    keep = rot_bound < limit()
    rows, rot_bound = rows[keep], rot_bound[keep]
    ranked = np.argsort(rot_bound, kind="stable")
    rows, rot_bound = rows[ranked], rot_bound[ranked]
    position = {int(r): i for i, r in enumerate(rows)}
    caps = StepCaps(structure, F[rows], max_padding(filters))
    for n, group in enumerate(plan_chunks(structure, F, rows, cache)):
        if rotating_groups is not None and n >= rotating_groups:
            break
        group = group[rot_bound[[position[int(r)] for r in group]] < limit()]
        if not len(group):
            break
        batch = plans_for(structure, F[group], True, max_padding(filters), cache,
                          keep_steps=steps_within(model, structure, limit(), budget, output_cap),
                          caps=caps)
        yield score(batch, model, budget, filters, output_cap)


def steps_within(model: BatchCostModel, structure: PlanStructure, limit: float,
                 budget: float = math.inf, output_cap: float = math.inf) -> StepFilter | None:
    """A :data:`.plan_space.StepFilter` keeping the (row, S) pairs whose plans can fit
    ``budget`` bytes per core (and ``output_cap`` for the output's partition) and take
    ``limit`` seconds or less (by the model's ``step_lower_bound``, if it has one): a plan
    slower than the incumbent, or one that does not fit, is never chosen, so it need not be
    built.

    The cheap bounds go first and the costly one sees what they keep: the bytes bound
    (:func:`.bounds.step_partition_lower_bounds`; within a tight budget, an Elk trade-off
    ladder's lowest rung, it drops most pairs), then the compute and synchronization of
    those steps (the model's ``step_fixed_lower_bound``, if it has one; of a prefill
    attention matmul's five million pairs it keeps 2%), then the shifts' bound. All are
    lower bounds, so the search returns the plan it returns without the filter.
    """
    bound = getattr(model, "step_lower_bound", None)
    fixed = getattr(model, "step_fixed_lower_bound", None)
    timed = bound is not None and math.isfinite(limit)
    sized = math.isfinite(budget) or math.isfinite(output_cap)
    if not (timed or sized):
        return None
    limit = limit * (1 + BOUND_SLACK)

    def keep(F: np.ndarray, S: np.ndarray, xp: np.ndarray) -> np.ndarray:
        parts = step_partition_lower_bounds(structure, F, S, xp)
        wanted = parts.sum(axis=1) + structure.extra_bytes(xp, xp // S) <= budget
        if math.isfinite(output_cap):
            wanted &= parts[:, -1] <= output_cap
        rows = np.flatnonzero(wanted)
        if timed and fixed is not None and len(rows):
            rows = rows[fixed(structure, F[rows], S[rows], xp[rows]) <= limit]
        if timed and len(rows):
            rows = rows[bound(structure, F[rows], S[rows], xp[rows], parts[rows]) <= limit]
        kept = np.zeros(len(F), bool)
        kept[rows] = True
        return kept

    return keep


def fastest_rows(structure: PlanStructure, model: BatchCostModel, budget: float, max_cores: int,
                 k: int, cache: SearchMemo | None = None, output_cap: float = math.inf,
                 F: np.ndarray | None = None, rotating: bool = True,
                 within: float = math.inf, rotating_groups: int | None = None) -> ScoredPlans:
    """The fastest plan of each of the ``k`` F_op rows whose fastest plans are fastest
    (exact, as :func:`best_plan`, whose answer is the first of ``k = 1``), fastest first;
    ``F``: only these rows (default: the whole space); ``rotating=False``: unrotated plans
    only; ``within``: only plans faster than this. The same branch and bound prunes with the
    ``k``-th row's time (or ``within``) in place of the incumbent's."""
    cache = cache_or_new(cache)
    if F is None:
        F, bound = _rows_and_bounds(structure, model, max_cores, None, output_cap, cache)
    else:
        keep = _output_within(structure, F, output_cap)
        F = F if keep is None else F[keep]
        bound = model.time_lower_bound(structure, F) if len(F) else np.zeros(0)
    kept: dict[bytes, ScoredPlans] = {}

    def limit() -> float:
        times = sorted(float(v.time[0]) for v in kept.values())
        return min(within, times[k - 1] if len(times) >= k else math.inf)

    def absorb(scored: ScoredPlans) -> None:
        cut = limit()
        scored = scored.take(np.flatnonzero(scored.time < cut if cut == within else scored.time <= cut))
        if not len(scored):
            return
        order = np.lexsort((scored.batch.cores, scored.memory, scored.time))
        _, first = np.unique(scored.batch.F[order], axis=0, return_index=True)
        rows = order[np.sort(first)][:k]  # each row's fastest, the k fastest of those
        for i in rows:
            row = scored.batch.F[i].tobytes()
            held = kept.get(row)
            if held is None or _better(scored.take(np.array([i])), held):
                kept[row] = scored.take(np.array([i]))
        for row in sorted(kept, key=lambda r: (float(kept[r].time[0]), float(kept[r].memory[0])))[k:]:
            del kept[row]

    if len(F):
        by_bound = np.argsort(bound, kind="stable")
        for scored in _pruned_scores(structure, model, F, bound, by_bound, budget, None,
                                     output_cap, cache, limit, rotating, rotating_groups):
            absorb(scored)
    best = sorted(kept.values(), key=lambda v: (float(v.time[0]), float(v.memory[0])))
    return ScoredPlans.concat(best, structure)


def _argmin(scored: ScoredPlans) -> ScoredPlans | None:
    if not len(scored):
        return None
    # Fastest; among equally fast plans the one with least memory, then fewest cores.
    i = np.lexsort((scored.batch.cores, scored.memory, scored.time))[0]
    return scored.take(np.array([i]))


def _better(a: ScoredPlans, b: ScoredPlans) -> bool:
    return (a.time[0], a.memory[0]) < (b.time[0], b.memory[0])


def min_memory_plan(structure: PlanStructure, model: BatchCostModel, max_cores: int,
                    filters: PlanFilters | None = None,
                    cache: SearchMemo | None = None) -> ScoredPlans | None:
    """The plan with the fewest bytes per core (fastest among those), exactly."""
    cache = cache_or_new(cache)
    F = candidate_partitions(structure, max_cores, filters)
    if not len(F):
        return None
    bound = memory_lower_bound(structure, F)
    rows = np.argsort(bound, kind="stable")
    best: ScoredPlans | None = None
    best_mem = math.inf
    for group in plan_chunks(structure, F, rows, cache):
        group = group[bound[group] <= best_mem]
        if not len(group):
            break
        batch = plans_for(structure, F[group], max_padding=max_padding(filters), cache=cache)
        if not len(batch):
            continue
        memory = batch.memory()
        low = int(memory.min())
        if low > best_mem:
            continue
        cand = _argmin(score(batch.take(np.flatnonzero(memory == low)), model, low, filters))
        if cand is not None and (low < best_mem or _better(cand, best)):
            best, best_mem = cand, float(low)
    return best


def scan(structure: PlanStructure, model: BatchCostModel, max_cores: int,
         filters: PlanFilters | None, budget: float,
         cache: SearchMemo | None = None, output_cap: float = math.inf) -> Iterator[ScoredPlans]:
    """Every plan of the (filtered) space that fits ``budget`` (and ``output_cap``), scored,
    in batches."""
    cache = cache_or_new(cache)
    F = candidate_partitions(structure, max_cores, filters)
    F = F[memory_lower_bound(structure, F) <= budget]
    rows = np.arange(len(F))
    for group in plan_chunks(structure, F, rows, cache):
        yield score(plans_for(structure, F[group], max_padding=max_padding(filters), cache=cache),
                    model, budget, filters, output_cap)


# -- plan_operator ---------------------------------------------------------------------------
def plan_operator(
    expr: TensorExpr,
    hw: HardwareSpec,
    cost_model: CostModel | None = None,
    budget_bytes: int | None = None,
    name: str | None = None,
    cache: SearchMemo | None = None,
    hbm_inputs: Sequence[int] = (),
    producers: Sequence[Producer] = (),
    arriving: Sequence[int] = (),
    output_cap: int | None = None,
) -> PlannedOp:
    """The fastest plan of one operator whose per-core footprint fits a budget (T10 §4.3.1).

    This is the exact minimum-time plan under a memory budget: with the default analytic
    cost model (or any :class:`BatchCostModel`) the branch-and-bound search returns what
    scoring every valid plan of the complete space on up to ``hw.num_cores`` cores would
    return (T10's search constraints, :class:`PlanFilters`, are not applied). Among equally
    fast plans it takes the one with the least memory, then the fewest cores. It is the
    fastest point of the operator's time/memory Pareto frontier (:func:`pareto_plans` with
    ``filters=PlanFilters.none()``) that fits the budget.

    Any other :class:`CostModel` callable re-ranks the analytic model's time/memory Pareto
    plans within the budget and its fastest fitting plans (such a model cannot be bounded,
    so the complete space is not scored with it). On a multi-chip system the plan's mapping
    to physical cores (``core_order`` and ``chips``) is then chosen near the operator's HBM
    inputs and producers (:func:`.mapping.choose_core_order`); with the default model the
    plan itself is chosen there too, among the search's fastest, by its time plus the seconds
    its bytes take across chips (``_chip_aware``).

    Parameters
    ----------
    expr : TensorExpr
        The operator's tensor expression (``op.expr`` of a device program's operator,
        :func:`tvm_icca.device_programs`).
    hw : HardwareSpec
        The chip: its cores, SRAM, compute and links.
    cost_model : CostModel, optional
        The cost model; ``None`` is the analytic model (:class:`AnalyticCostModel`).
    budget_bytes : int, optional
        Bytes of tensor partitions a core may hold; ``None`` is ``hw.usable_sram_bytes``,
        the SRAM per core left after the shift buffer.
    name : str, optional
        The operator's name in error messages (default: its kind).
    cache : SearchMemo, optional
        A memo owned by the caller (e.g. the compiler's plan cache): it memoizes structures,
        temporal-factor assignments and, for the default model, the result.
    hbm_inputs : sequence of int
        Indices into ``expr.inputs`` of inputs read from HBM (multi-chip placement only).
    producers : sequence of (int, OpLayout)
        ``(input index, layout)`` of inputs produced earlier in the region, whose data the
        placement stays near (multi-chip placement only).
    arriving : sequence of int
        Indices into ``expr.inputs`` whose arrival in the plan's partitions the search prices
        with the default model (``partition bytes / link bandwidth``,
        :class:`.batch_cost.ArrivalCostModel`, as T10 §4.3.2's reconciliation does for
        activations): inputs an earlier operator produced, so that replicating one onto
        many cores is not free. The reported time stays the operator's own.
    output_cap : int, optional
        The most bytes per core the output's partition may take: an output the region holds
        while later operators run is budgeted against all of them (see
        :func:`tvm_icca.model_pass.region_plans.plan_region`). ``None``: no cap.

    Returns
    -------
    PlannedOp
        The plan, its layout, its estimated cost and its bytes per core.

    Raises
    ------
    PlanNotFoundError
        No plan fits the budget: the message names the operator, the smallest footprint any
        plan needs and the budget.
    """
    budget = hw.usable_sram_bytes if budget_bytes is None else int(budget_bytes)
    label = name or expr.kind
    check_fits_chip(expr, hw, budget, label)
    default = cost_model is None or type(cost_model) is AnalyticCostModel
    hbm_inputs = tuple(sorted(int(t) for t in hbm_inputs))
    arriving = tuple(sorted({int(t) for t in arriving}))
    # the search does not depend on the chips; its result is kept without the mapping, which
    # is chosen (and memoized) per context: HBM inputs and producers' layouts. Keyed on the
    # fields the search reads (.hw_fields), so chips differing in others share it.
    cap = math.inf if output_cap is None else int(output_cap)
    in_place = in_place_inputs(producers, arriving, mapped=hw.num_chips > 1)
    key = (("search", expr.structure_key(views=False), search_key(hw), arriving, in_place, cap, budget)
           if default and cache is not None else None)

    def search() -> PlannedOp:
        if cache is not None:  # counted before: a search proving no plan fits is one too
            cache.searches += 1
        return _search(expr, hw, cost_model, budget, label, cache_or_new(cache), default,
                       arriving, cap, in_place)

    if key is None:
        result = search()
    else:
        result = _searched(cache, key, budget)
        if result is None:
            # one process at a time per key (a sweep's workers on one chip): another that
            # searched it meanwhile has left it in the store
            with cache.claim(key):
                result = _searched(cache, key, budget)
                if result is None:
                    result = search()
                    cache.remember(key, result)
                    budgets = cache.planned(key[:-1]) or ()
                    cache.remember(key[:-1], (*budgets[-MAX_BUDGETS_KEPT + 1:], (budget, result)))
        if result.expr != expr:  # same structure: this operator's tensor names
            result = dataclasses.replace(result, expr=expr, layout=OpLayout(expr, result.plan))
    if default and hw.num_chips > 1:
        return _chip_aware(result, hw, budget, cache, hbm_inputs, producers, arriving, cap, in_place)
    return mapped_plan(result, hw, hbm_inputs, producers, cache,
                   tuple(p.tensor for p in in_place) if default and arriving else ())


def _searched(cache: SearchMemo, key: tuple, budget: int) -> PlannedOp | None:
    """The search of ``key`` a memo holds, or the optimum an earlier budget's proves."""
    hit = cache.planned(key)
    return hit if hit is not None else _within_budget(cache, key, budget)


#: Budgets remembered per operator structure for :func:`_within_budget`.
MAX_BUDGETS_KEPT = 16


def optimum_within(searched: Iterable[tuple[int, PlannedOp]], budget: int) -> PlannedOp | None:
    """The exact optimum for ``budget`` if one of the ``(budget, optimum)`` pairs of earlier
    searches of the same operator proves it.

    The optimum within a larger budget ``B`` whose footprint fits ``budget`` is also the
    optimum within ``budget`` (every plan that fits ``budget`` fits ``B``). The identical
    layers of one region see budgets that differ by the outputs the region holds until it
    ends (an LLM's per-layer cache updates), so without this every layer's operators would
    be searched again.
    """
    for larger, result in searched:
        if result.memory_bytes_per_core <= budget <= larger:
            return result
    return None


def _within_budget(cache: SearchMemo, key: tuple, budget: int) -> PlannedOp | None:
    """:func:`optimum_within` over the searches ``cache`` remembers for ``key`` but its budget."""
    return optimum_within(cache.planned(key[:-1]) or (), budget)


def _search(expr: TensorExpr, hw: HardwareSpec, cost_model: CostModel | None, budget: int,
            label: str, cache: SearchMemo, default: bool, arriving: tuple[int, ...] = (),
            output_cap: float = math.inf, in_place: tuple[InPlace, ...] = ()) -> PlannedOp:
    """The plan of :func:`plan_operator` before its mapping to physical cores. With the
    default model and ``arriving`` inputs, the search uses :class:`.batch_cost.ArrivalCostModel`
    as the reconciliation does: the inputs priced as they arrive in the plan's partitions,
    and, for a matmul, the replica reduction as the device schedules it (T10's ring term
    under-estimates many replicas of small partitions: prefill's ``P V`` summed over 8K
    keys); the reported time stays the analytic model's. An attention operator is always
    searched with the device's reduction schedule (its key splits are that sum) and
    reported under it."""
    structure = plan_structure(expr, cache)
    need = cache.planned(_least_memory_key(structure, hw))
    if need is not None and budget < need:
        # an earlier search of this structure proved the least any plan needs: no search
        # below it can succeed (a trade-off ladder's failing rung, T10 §4.3.2)
        raise_nothing_fits(structure, hw, budget, label, cache, output_cap)
    if default or _is_batch_model(cost_model):
        model = search_model(expr, hw, arriving, in_place) if default else cost_model
        best = best_plan(structure, model, budget, hw.num_cores, cache=cache, output_cap=output_cap)
        if best is None:
            raise_nothing_fits(structure, hw, budget, label, cache, output_cap)
        plan = best.plan(0)
        layout = OpLayout(expr, plan)
        if default and expr.kind == "attention":
            # reported under the model it was chosen by: its replicas as the device sums them
            cost = PlanCost(**AnalyticBatchModel(hw, reduction="schedule").layout_terms(layout, structure))
        else:
            cost = (cost_model or AnalyticCostModel())(layout, hw) if default else _batch_cost(model, best)
        return PlannedOp(expr, plan, layout, cost, layout.memory_bytes_per_core())
    return _rerank(structure, hw, cost_model, budget, label, cache, output_cap)


def search_model(expr: TensorExpr, hw: HardwareSpec, arriving: tuple[int, ...] = (),
                 in_place: tuple[InPlace, ...] = ()) -> BatchCostModel:
    """The batch model :func:`plan_operator` searches with by default: the analytic model,
    with the ``arriving`` inputs priced (:class:`.batch_cost.ArrivalCostModel`) when there
    are any. The region planner scores its plans with the same model (departure pricing,
    :mod:`.departure`)."""
    model = AnalyticBatchModel(hw)
    if not arriving and expr.kind != "attention":
        return model
    # the device's reduction schedule prices a matmul's sum over many replicas of small
    # partitions (prefill's P V over 8K keys) that T10's ring term under-estimates; its
    # bound prunes a convolution's far larger plan space too weakly (ResNet-18 tiny on
    # 5,888 cores: 4.6 s -> minutes), so only matmuls and attention (whose key splits are
    # the same sum, statistics included)
    return ArrivalCostModel(model, arriving, hw,
                            device_reduction=expr.kind in ("matmul", "attention"),
                            in_place=in_place)


def in_place_inputs(producers: Sequence[Producer], arriving: Sequence[int],
                    mapped: bool = True) -> tuple[InPlace, ...]:
    """The ``arriving`` inputs whose producers left them as blocks one per core
    (:func:`.mapping.producer_numbering`, :class:`.batch_cost.InPlace`): a plan that reads
    one in the same blocks finds it in place once mapped as its producer
    (:func:`.mapping.candidate_placements`); unless ``mapped`` (a plan on one chip, which
    keeps its own numbering), only if its own numbering is the producer's."""
    found = []
    for t, layout in producers:
        if t not in arriving:
            continue
        grid = producer_grid(layout)
        numbering = producer_numbering(layout, grid)
        if numbering is None:
            continue
        found.append(InPlace(int(t), tuple(int(b) for b in grid.block),
                             tuple(int(c) for c in grid.counts),
                             None if mapped else numbering[0]))
    return tuple(sorted(found, key=lambda p: p.tensor))


def mapped_plan(result: PlannedOp, hw: HardwareSpec, hbm_inputs: tuple[int, ...],
                producers: Sequence[Producer], cache: SearchMemo | None,
                in_place: tuple[int, ...] = ()) -> PlannedOp:
    """``result`` with the placement :func:`.mapping.choose_core_order` picks. The candidate
    placements and their bytes are memoized in ``cache`` on what they depend on (not on the
    bandwidths, :data:`.hw_fields.PLACEMENT_FIELDS`); the choice among them is made for
    ``hw``'s bandwidths each time."""
    if hw.num_chips <= 1:
        return result
    expr = result.expr
    placements = _placements(expr, result.plan, hw, hbm_inputs, producers, cache, in_place)
    plan = pick_placement(result.plan, placements, hw, hbm_inputs)
    if plan == result.plan:
        return result
    return dataclasses.replace(result, plan=plan, layout=OpLayout(expr, plan, hw.cores_per_chip))


def _placements(expr: TensorExpr, plan: ExecutionPlan, hw: HardwareSpec, hbm_inputs: tuple[int, ...],
                producers: Sequence[Producer], cache: SearchMemo | None,
                in_place: tuple[int, ...]) -> list[Placement]:
    """:func:`.mapping.placement_bytes` of ``plan``, memoized in ``cache`` on what they depend
    on (not on the bandwidths, :data:`.hw_fields.PLACEMENT_FIELDS`)."""
    if cache is None:
        return placement_bytes(expr, plan, hw, hbm_inputs, producers, in_place)
    key = ("placements", expr.structure_key(views=False), json.dumps(plan.to_dict(), sort_keys=True),
           placement_key(hw), hbm_inputs, producer_key(producers), in_place)
    return cache.planned_once(key, lambda: placement_bytes(expr, plan, hw, hbm_inputs, producers, in_place))


#: F_op rows whose fastest plans the chip-aware choice (:func:`_chip_aware`) weighs besides
#: the search's optimum. The inter-chip bytes of a plan depend on its factorization, which
#: the chip-unaware model barely tells apart among its fastest rows (a softmax's element-wise
#: operators: dozens of rows within a few percent); a handful of them holds the aligned ones,
#: and each costs its placements (about 0.1 s on 5,888 cores).
CHIP_AWARE_ROWS = 8

#: Groups of rows (:func:`.scoring.plan_chunks`: 2,000 candidate plans, then four times as
#: many each, up to 1.6 million) whose rotating plans the chip-aware choice scores, best
#: rotating bound first. Without a cap a convolution on 5,888 cores scanned 38 groups (48 s;
#: ResNet-50 on ipu-pod4-hbm compiled in over 25 minutes), where a prefill layer's
#: projections need 3 to 9 groups in all (their unrotated rows included).
CHIP_AWARE_ROTATING_GROUPS = 6


def _chip_aware(result: PlannedOp, hw: HardwareSpec, budget: int, cache: SearchMemo | None,
                hbm_inputs: tuple[int, ...], producers: Sequence[Producer], arriving: tuple[int, ...],
                output_cap: float, in_place: tuple[InPlace, ...]) -> PlannedOp:
    """The plan of :func:`plan_operator` on several chips: among the search's optimum, the
    fastest plans of its :data:`CHIP_AWARE_ROWS` fastest F_op rows and, per producer that left
    its output in blocks one per core (:func:`in_place_inputs`), the fastest unrotated plan
    that reads those blocks, the one whose time (the search's model) plus the seconds its best
    placement (:func:`.mapping.best_placement`) sends bytes across chips -- its rotations'
    shifts, re-layouts from its producers and partial sums, at ``hw.inter_chip_bandwidth``
    (Elk §5) -- is least; ties keep the search's optimum. The HBM reads pick the placement
    of each plan, as before, but not the plan: Elk's preloads overlap them with execution
    (Elk §4.2), while the fabric's bytes hold up the operator that sends them. A candidate
    whose output partition is larger than the optimum's is passed over: the region may hold
    that output while later operators run, and their budgets would shrink (a prefill layer's
    later searches then ran within a few KiB and took minutes). The reported time stays the
    analytic model's of the plan chosen."""
    expr = result.expr
    memo = cache_or_new(cache)
    structure = plan_structure(expr, memo)
    model = search_model(expr, hw, arriving, in_place)
    found = in_place_inputs(producers, tuple(t for t, _ in producers), mapped=True)
    tensors = tuple(p.tensor for p in found)
    own = float(model.times(PlanBatch.of_plan(structure, result.plan))[0][0])
    mapped, _, inter_s = best_placement(
        result.plan, _placements(expr, result.plan, hw, hbm_inputs, producers, cache, tensors), hw, hbm_inputs)
    best = (own + inter_s, result.plan, mapped)
    if inter_s > 0:  # (when nothing crosses chips there is nothing to gain)
        # only plans faster than the optimum with its crossings can win: no placement sends
        # fewer than no bytes
        key = ("chip-aware rows", expr.structure_key(views=False), search_key(hw), arriving, in_place,
               output_cap, budget, found, best[0])
        shortlist = memo.planned_once(key, lambda: _chip_aware_rows(
            structure, model, budget, hw, memo, output_cap, found, best[0]))
        out = len(expr.tensors) - 1
        held = result.layout.partition_bytes(out)
        for plan, time_s in sorted(((p, t) for p, t in shortlist if p != result.plan), key=lambda c: c[1]):
            if time_s >= best[0]:
                break
            if OpLayout(expr, plan).partition_bytes(out) > held:
                continue  # its region holds the output while later operators run: keep their room
            placements = _placements(expr, plan, hw, hbm_inputs, producers, cache, tensors)
            candidate, _, inter_s = best_placement(plan, placements, hw, hbm_inputs)
            if time_s + inter_s < best[0] * (1 - 1e-9):
                best = (time_s + inter_s, plan, candidate)
    _, plan, mapped = best
    if plan == result.plan:
        if mapped == result.plan:
            return result
        return dataclasses.replace(result, plan=mapped, layout=OpLayout(expr, mapped, hw.cores_per_chip))
    layout = OpLayout(expr, plan)
    return PlannedOp(expr, mapped, OpLayout(expr, mapped, hw.cores_per_chip), AnalyticCostModel()(layout, hw),
                     layout.memory_bytes_per_core())


def _chip_aware_rows(structure: PlanStructure, model: BatchCostModel, budget: int, hw: HardwareSpec,
                     cache: SearchMemo, output_cap: float,
                     found: tuple[InPlace, ...], within: float) -> list[tuple[ExecutionPlan, float]]:
    """The candidates of :func:`_chip_aware` besides the optimum, faster than ``within``,
    with their times."""
    # the fastest rows as they are (rotating plans, whose rings a placement may keep on one
    # chip, mapping.candidate_core_orders) and without rotations (nothing shifts at all)
    parts = [fastest_rows(structure, model, budget, hw.num_cores, CHIP_AWARE_ROWS, cache, output_cap,
                          rotating=rotating, within=within, rotating_groups=CHIP_AWARE_ROTATING_GROUPS)
             for rotating in (True, False)]
    F = _candidate_rows(structure, hw.num_cores, None, cache)
    if len(F):
        xp = ceil_div(structure.extents[None, :], F)
        for p in found:
            rows = F[in_place_rows(p, structure, F, xp)]
            if len(rows):
                parts.append(fastest_rows(structure, model, budget, hw.num_cores, 1, cache, output_cap,
                                          F=rows, rotating=False, within=within))
    return [(part.plan(i), float(part.time[i])) for part in parts for i in range(len(part))]


def _is_batch_model(model: object) -> bool:
    return all(hasattr(model, m) for m in ("times", "time_lower_bound", "rotating_lower_bound"))


def _batch_cost(model: BatchCostModel, best: ScoredPlans) -> PlanCost:
    components = getattr(model, "components", None)
    if components is not None:
        _, terms = components(best.batch)
        return PlanCost(**{k: float(v[0]) for k, v in terms.items()})
    return PlanCost(float(best.time[0]), 0.0, 0.0, 0.0, 0.0)


def _rerank(structure: PlanStructure, hw: HardwareSpec, cost_model: CostModel, budget: int,
            label: str, cache: SearchMemo, output_cap: float = math.inf,
            keep_fastest: int = 32) -> PlannedOp:
    """Score a shortlist with ``cost_model``: the exact analytic optimum, the analytic
    Pareto plans of the filtered space within the budget and its fastest fitting plans,
    each under every loop order (up to 24)."""
    analytic = AnalyticBatchModel(hw)
    front: list[ScoredPlans] = []
    fastest: list[ScoredPlans] = []
    for scored in scan(structure, analytic, hw.num_cores, PlanFilters.t10(), budget, cache,
                       output_cap):
        if len(scored):
            front.append(scored.take(pareto_front(scored.time, scored.memory)))
            fastest.append(scored.take(np.argsort(scored.time, kind="stable")[:keep_fastest]))
    exact = best_plan(structure, analytic, budget, hw.num_cores, cache=cache, output_cap=output_cap)
    if exact is None:
        raise_nothing_fits(structure, hw, budget, label, cache, output_cap)
    pool = ScoredPlans.concat([exact] + front + fastest, structure)
    expr = structure.expr
    best: PlannedOp | None = None
    seen = set()
    for i in range(len(pool)):
        base = pool.plan(i)
        sig = (tuple(sorted(base.op_partition.items())), tuple(tuple(sorted(t.items())) for t in base.temporal))
        if sig in seen:
            continue
        seen.add(sig)
        orders = [base.loop_order]
        if math.factorial(len(base.loop_order)) <= 24:
            orders = list(itertools.permutations(base.loop_order))
        for order in orders:
            plan = ExecutionPlan(dict(base.op_partition), tuple(dict(t) for t in base.temporal), tuple(order))
            layout = OpLayout(expr, plan)
            cost = cost_model(layout, hw)
            if best is None or cost.time_s < best.time_s:
                best = PlannedOp(expr, plan, layout, cost, layout.memory_bytes_per_core())
    assert best is not None
    return best


def _least_memory_key(structure: PlanStructure, hw: HardwareSpec) -> tuple:
    """Where a memo keeps :func:`least_memory` of ``structure`` on ``hw``: it reads the
    plan space (the structure and the cores), not the budget."""
    return ("least_memory", structure.expr.structure_key(views=False), search_key(hw))


def least_memory(structure: PlanStructure, hw: HardwareSpec,
                 cache: SearchMemo | None = None) -> int:
    """Bytes per core of the plan of ``structure`` that needs the fewest (:func:`min_memory_plan`;
    -1: the space is empty), once per structure and chip in ``cache``."""
    def compute() -> int:
        smallest = min_memory_plan(structure, AnalyticBatchModel(hw), hw.num_cores, cache=cache)
        return int(smallest.memory[0]) if smallest is not None else -1

    return compute() if cache is None else cache.planned_once(_least_memory_key(structure, hw), compute)


def raise_nothing_fits(structure: PlanStructure, hw: HardwareSpec, budget: int, label: str,
                       cache: SearchMemo | None = None, output_cap: float = math.inf):
    """Raise the :class:`PlanNotFoundError` of an operator no plan of which fits ``budget``
    (and ``output_cap``): it names the least bytes per core any plan needs."""
    need = least_memory(structure, hw, cache)
    capped = (f", with at most {int(output_cap)} bytes per core of its output"
              if math.isfinite(output_cap) else "")
    raise PlanNotFoundError(
        f"{operator_subject(label)} ({structure.expr.tensor_summary()}) has no execution plan that "
        f"fits chip '{hw.name}': the smallest needs {need} bytes per core, the budget is "
        f"{budget} bytes per core on {hw.num_cores} cores{capped}{budget_note(hw, budget)}"
    )
