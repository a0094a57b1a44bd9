"""Per-operator Pareto-optimal plans: execution time vs bytes per core (T10 §4.3.1, Fig. 16).

A plan is kept when no other plan is at least as fast with at most as much memory (one plan
per distinct point). T10 computes the frontier over the space left by its two search
constraints (:class:`PlanFilters`, Fig. 17's "filtered" space); with ``PlanFilters.none()``
it is the frontier of the complete space. Either way the scan is pruned with the bounds of
:mod:`.search`: an ``F_op`` row whose memory and time lower bounds are already dominated by
the frontier cannot add a point, so it is never expanded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.plan import ExecutionPlan
from tvm_icca.plan_search.batch_cost import AnalyticBatchModel, BatchCostModel
from tvm_icca.plan_search.bounds import (
    memory_lower_bound,
    partition_lower_bounds,
    step_partition_lower_bounds,
)
from tvm_icca.plan_search.filters import PlanFilters
from tvm_icca.plan_search.plan_space import StepCaps, StepFilter, plans_for
from tvm_icca.plan_search.scoring import (
    ScoredPlans,
    candidate_partitions,
    max_padding,
    pareto_front,
    plan_chunks,
    score,
)
from tvm_icca.plan_search.search_memo import SearchMemo, cache_or_new, plan_structure
from tvm_icca.plan_search.space_size import SpaceSizes, count_complete_space
from tvm_icca.plan_search.structure import PlanStructure

__all__ = ["ParetoPlan", "pareto_front", "pareto_fronts", "pareto_plan_sets", "pareto_plans",
           "pareto_scored", "relaxations", "space_sizes"]


def _dominated(front_memory: np.ndarray, front_time: np.ndarray, memory_lb: np.ndarray,
               time_lb: np.ndarray, tolerance: float = 0.0) -> np.ndarray:
    """Rows whose every plan is weakly dominated by a frontier point (or would be less than
    ``tolerance`` faster than one, relative)."""
    if not len(front_time):
        return np.zeros(len(memory_lb), bool)
    # The frontier is sorted by memory with strictly falling times: the last point with
    # memory <= a row's bound is the fastest such point.
    pos = np.searchsorted(front_memory, memory_lb, side="right") - 1
    fastest = np.where(pos >= 0, front_time[np.maximum(pos, 0)], math.inf)
    return fastest <= time_lb * (1.0 + tolerance)


def pareto_scored(structure: PlanStructure, model: BatchCostModel, max_cores: int,
                  filters: PlanFilters | None, budget: float,
                  tensors: Sequence[int] | None = None, tolerance: float = 0.0,
                  cache: SearchMemo | None = None) -> ScoredPlans:
    """The Pareto frontier (as scored plans, fewest bytes first) of the filtered space.

    The frontier trades time for bytes per core (all partitions); with ``tensors`` it trades
    time for the bytes of those tensors' partitions only (e.g. the weights an operator keeps
    on chip while idle, T10 §4.3.2), every plan still fitting ``budget`` in full. A
    ``tolerance`` > 0 skips candidate rows that could beat the frontier found so far by less
    than that fraction of its time (an epsilon-Pareto set, much cheaper on tight budgets).
    """
    return pareto_fronts(structure, model, max_cores, filters, budget, [tensors], tolerance, cache)[0]


def pareto_fronts(structure: PlanStructure, model: BatchCostModel, max_cores: int,
                  filters: PlanFilters | None, budget: float,
                  objectives: Sequence[Sequence[int] | None], tolerance: float = 0.0,
                  cache: SearchMemo | None = None) -> list[ScoredPlans]:
    """Several frontiers (one per memory objective, see :func:`pareto_scored`) in one scan:
    each candidate row is expanded and scored once, unless every frontier dominates it."""
    cache = cache_or_new(cache)
    F = candidate_partitions(structure, max_cores, filters)
    memory_lb = memory_lower_bound(structure, F)
    keep = memory_lb <= budget
    F, memory_lb = F[keep], memory_lb[keep]
    bounds = partition_lower_bounds(structure, F)
    objective_lb = [memory_lb if t is None else bounds[:, list(t)].sum(axis=1) for t in objectives]
    time_lb = model.time_lower_bound(structure, F)
    rows = np.lexsort((objective_lb[0], time_lb))
    caps = StepCaps(structure, F, max_padding(filters))
    fronts = [ScoredPlans.concat([], structure) for _ in objectives]
    front_objective = [np.zeros(0) for _ in objectives]
    # (A pair-level dominance filter, as best_plan uses, costs more than it saves here: the
    # frontier spans every memory level, so few pairs are dominated before scoring.)
    for group in plan_chunks(structure, F, rows, cache):
        dominated = np.ones(len(group), bool)
        for k in range(len(objectives)):
            dominated &= _dominated(front_objective[k], fronts[k].time, objective_lb[k][group],
                                    time_lb[group], tolerance)
        group = group[~dominated]
        if not len(group):
            continue
        keep = _undominated_steps(structure, model, budget, objectives, fronts, front_objective)
        scored = score(plans_for(structure, F[group], max_padding=max_padding(filters), cache=cache,
                                 keep_steps=keep, caps=caps), model, budget, filters)
        for k, tensors in enumerate(objectives):
            merged = ScoredPlans.concat([fronts[k], scored], structure)
            # (the frontier's objective values are kept: only the new plans' are computed)
            objective = np.concatenate([front_objective[k], _objective(scored, tensors)])
            kept = pareto_front(merged.time, objective)
            fronts[k], front_objective[k] = merged.take(kept), objective[kept]
    return fronts


def _undominated_steps(structure: PlanStructure, model: BatchCostModel, budget: float,
                       objectives: Sequence[Sequence[int] | None], fronts: list[ScoredPlans],
                       front_objective: list[np.ndarray]) -> StepFilter | None:
    """A step filter keeping the (F_op row, steps) pairs that may still add a frontier point.

    A pair is dropped when it cannot fit ``budget`` or when, for every objective, a point
    found so far is at least as fast as the pair's time bound (the model's
    ``step_lower_bound``: compute, synchronization and the least shifts of those steps)
    with at most its bytes bound (:func:`.bounds.step_partition_lower_bounds`). The
    comparison is exact (no tolerance): the pairs dropped hold only plans the frontier
    would not keep, so the frontier is the one found without the filter.
    """
    step_bound = getattr(model, "step_lower_bound", None)
    if step_bound is None:
        return None

    def keep(F: np.ndarray, S: np.ndarray, xp: np.ndarray) -> np.ndarray:
        parts = step_partition_lower_bounds(structure, F, S, xp)
        total = parts.sum(axis=1)
        fits = total <= budget
        if not len(fronts[0]):
            return fits
        time_lb = step_bound(structure, F, S, xp, parts)
        dominated = np.ones(len(F), bool)
        for k, tensors in enumerate(objectives):
            bound = total if tensors is None else parts[:, list(tensors)].sum(axis=1)
            dominated &= _dominated(front_objective[k], fronts[k].time, bound, time_lb)
        return fits & ~dominated

    return keep


def _objective(scored: ScoredPlans, tensors: Sequence[int] | None) -> np.ndarray:
    if tensors is None:
        return scored.memory
    return scored.batch.partition_bytes()[:, list(tensors)].sum(axis=1)


@dataclass(frozen=True)
class ParetoPlan:
    """One Pareto-optimal plan of an operator (T10 §4.3.1): no other plan is at least as fast
    with at most as many bytes per core.

    Attributes
    ----------
    plan : ExecutionPlan
        The compute-shift plan (``OpLayout(expr, plan)`` gives its steps and partitions).
    time_s : float
        Its estimated execution time in seconds (the cost model's).
    memory_bytes : int
        Bytes of tensor partitions each core holds (the shift buffer not included).
    cores : int
        Cores it uses (the product of F_op).
    """

    plan: ExecutionPlan
    time_s: float
    memory_bytes: int
    cores: int


def pareto_plans(expr: TensorExpr, hw: HardwareSpec, cost_model: BatchCostModel | None = None,
                 filters: PlanFilters | None = PlanFilters.t10(), budget_bytes: int | None = None,
                 relax: bool = True, tensors: Sequence[int] | None = None,
                 tolerance: float = 0.0, cache: SearchMemo | None = None) -> list[ParetoPlan]:
    """The time/memory Pareto frontier of one operator's plans within a budget (T10 §4.3.1).

    A plan is on the frontier when no other plan is at least as fast with at most as many
    bytes per core (one plan per distinct point). T10 computes these per operator, then picks
    one per operator for the whole model (§4.3.2); the fastest frontier plan that fits a
    budget is what :func:`plan_operator` returns for that budget when the frontier is that of
    the complete space (``filters=PlanFilters.none()``).

    Parameters
    ----------
    expr : TensorExpr
        The operator's tensor expression.
    hw : HardwareSpec
        The chip.
    cost_model : BatchCostModel, optional
        The vectorized cost model; ``None`` is the analytic one (:class:`AnalyticBatchModel`).
    filters : PlanFilters or None
        The space searched. The default is T10's search constraints with the Elk artifact's
        thresholds (``PlanFilters.t10()``, Fig. 17's "filtered" space); ``PlanFilters.none()``
        or ``None``: the complete space.
    budget_bytes : int, optional
        Bytes per core a plan may hold; ``None`` is ``hw.usable_sram_bytes``. A budget above
        the SRAM shows the frontier beyond what fits.
    relax : bool
        When no plan passes ``filters`` within the budget, drop the constraints one at a time
        (:func:`relaxations`: the parallelism one, then the padding one).
    tensors : sequence of int, optional
        Indices into ``expr.tensors``: trade time for those tensors' partition bytes only
        (e.g. the weights an operator keeps on chip while idle, T10 §4.3.2); every plan still
        fits the budget in full and ``memory_bytes`` stays the full footprint.
    tolerance : float
        0 for the exact frontier; above 0, candidates that could beat the frontier by less
        than that fraction of its time are skipped (an epsilon-Pareto set, faster).
    cache : SearchMemo, optional
        A memo shared with other searches of the same operator.

    Returns
    -------
    list of ParetoPlan
        The frontier, fewest bytes first (so times fall along the list); empty when nothing
        fits the budget.
    """
    return _as_plans(_fronts(expr, hw, cost_model, filters, budget_bytes, relax, [tensors],
                             tolerance, cache)[0])


def pareto_plan_sets(expr: TensorExpr, hw: HardwareSpec, objectives: Sequence[Sequence[int] | None],
                     cost_model: BatchCostModel | None = None,
                     filters: PlanFilters | None = PlanFilters.t10(), budget_bytes: int | None = None,
                     relax: bool = True, tolerance: float = 0.0,
                     cache: SearchMemo | None = None) -> list[list[ParetoPlan]]:
    """:func:`pareto_plans` for several memory objectives at once (one scan of the space)."""
    return [_as_plans(front) for front in
            _fronts(expr, hw, cost_model, filters, budget_bytes, relax, objectives, tolerance, cache)]


def _fronts(expr, hw, cost_model, filters, budget_bytes, relax, objectives, tolerance, cache):
    cache = cache_or_new(cache)
    structure = plan_structure(expr, cache)
    model = cost_model or AnalyticBatchModel(hw)
    budget = hw.usable_sram_bytes if budget_bytes is None else budget_bytes
    for space in relaxations(filters) if relax else [filters]:
        fronts = pareto_fronts(structure, model, hw.num_cores, space, budget, objectives, tolerance,
                               cache)
        if len(fronts[0]):
            break
    return fronts


def relaxations(filters: PlanFilters | None) -> list[PlanFilters | None]:
    """The spaces a relaxed Pareto search tries in turn, until one has a plan within budget:
    ``filters``, then without the parallelism constraint, then the complete space (``None``).

    Why the parallelism constraint goes first: it asks for 90% of the most cores the operator
    can use at all, and an operator too small to fill the chip reaches those counts only by
    cutting its short axes unevenly. An 8-channel 8x8 convolution with a 3x3 kernel on
    ``ipu-mk2`` (1,472 cores) pads at least 1.25x on every row of 1,323 cores or more, so no
    plan passes both T10 constraints; its complete space holds 25,417 F_op rows and 1.5e8
    plans, and a Pareto scan of it ran for minutes (its frontier spans every memory level of
    a few bytes, so the time bounds prune little: 1.6e7 (row, steps) pairs bounded in the
    first minute). Within the padding bound alone (883 rows, 11,240 pairs bounded) the scan
    takes a fraction of a second. That space also keeps what such operators want: a 1x1
    convolution from 8 to 16 channels on 4x4 runs fastest on 256 cores (one output element
    each, no split reduction to combine), 2.3x faster than on the 1,024 cores it reaches
    within the padding bound, and that plan is in both the complete and the padding-bound
    frontier. The complete space stays the last resort, for budgets that no plan within the
    padding bound fits.
    """
    spaces: list[PlanFilters | None] = [filters]
    if filters is None:
        return spaces
    loose = filters.without_parallelism()
    if loose != filters:
        spaces.append(loose)
    if math.isfinite(loose.max_padding_ratio):
        spaces.append(None)
    return spaces


def _as_plans(front: ScoredPlans) -> list[ParetoPlan]:
    return [ParetoPlan(front.plan(i), float(front.time[i]), int(front.memory[i]),
                       int(front.batch.cores[i])) for i in range(len(front))]


def filtered_space_size(structure: PlanStructure, max_cores: int, filters: PlanFilters | None,
                        budget: float | None = None, cache: SearchMemo | None = None) -> int:
    """Number of (F_op, f_t) plans passing ``filters`` (and fitting ``budget`` if given)."""
    cache = cache_or_new(cache)
    F = candidate_partitions(structure, max_cores, filters)
    if budget is not None:
        F = F[memory_lower_bound(structure, F) <= budget]
    total = 0
    pad = filters is not None and math.isfinite(filters.max_padding_ratio)
    for group in plan_chunks(structure, F, np.arange(len(F)), cache):
        batch = plans_for(structure, F[group], max_padding=max_padding(filters), cache=cache)
        keep = np.ones(len(batch), bool)
        if budget is not None:
            keep &= batch.memory() <= budget
        if pad:
            keep &= batch.padding() <= filters.max_padding_ratio + 1e-9
        total += int(keep.sum())
    return total


def space_sizes(expr: TensorExpr, hw: HardwareSpec, filters: PlanFilters = PlanFilters.t10(),
                cost_model: BatchCostModel | None = None,
                cache: SearchMemo | None = None) -> SpaceSizes:
    """Complete / filtered / Pareto sizes of one operator's plan space (T10 Fig. 17).

    The complete space is counted combinatorially on ``hw.num_cores`` cores; the filtered
    space applies ``filters`` and, when ``filters.fit_sram`` is set, drops plans that exceed
    a core's usable SRAM; the Pareto count is the frontier of that filtered space.
    """
    cache = cache_or_new(cache)
    structure = plan_structure(expr, cache)
    complete = count_complete_space(structure, hw.num_cores, cache)
    budget = hw.usable_sram_bytes if filters.fit_sram else math.inf
    filtered = filtered_space_size(structure, hw.num_cores, filters,
                                   budget if filters.fit_sram else None, cache)
    front = pareto_scored(structure, cost_model or AnalyticBatchModel(hw), hw.num_cores, filters,
                          budget, cache=cache)
    return SpaceSizes(complete.complete, complete.complete_plans, complete.op_partitions, filtered, len(front))
