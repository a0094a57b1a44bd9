"""Scoring candidate plans in bounded batches: the shared machinery of the exact searches.

:mod:`.search` (fastest plan) and :mod:`.pareto` (time/memory frontiers) both walk the
F_op rows of :func:`candidate_partitions` in groups of :func:`plan_chunks`, expand them
into plans and :func:`score` them with a batch cost model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from runtime_sim.contract.plan import ExecutionPlan
from tvm_icca.plan_search.batch_cost import BatchCostModel
from tvm_icca.plan_search.filters import PlanFilters
from tvm_icca.plan_search.intmath import INT, ceil_div, unique_rows
from tvm_icca.plan_search.plan_space import (
    PADDING_SLACK,
    PlanBatch,
    assignment_counts,
    op_partitions,
    padding_ratio,
    sharing_counts,
)
from tvm_icca.plan_search.search_memo import SearchMemo
from tvm_icca.plan_search.structure import PlanStructure

#: Candidate plans scored per numpy batch (bounds memory use, keeps pruning responsive).
CHUNK_PLANS = 100_000

#: Candidate plans (complete assignments, before any filter) per group of rows
#: :func:`plan_chunks` yields. The step filters drop most of a group's plans before they
#: are built (ResNet-50: about 1 in 30 is scored), so a group is many numpy batches' worth:
#: large enough that the per-group overhead stays small.
GROUP_PLANS = 16 * CHUNK_PLANS

#: Rows whose assignments :func:`plan_chunks` counts at once.
COUNT_ROWS = 512


@dataclass(frozen=True)
class ScoredPlans:
    """Plans with their time (best loop order), that order and their bytes per core."""

    batch: PlanBatch
    time: np.ndarray
    memory: np.ndarray
    order: np.ndarray

    def __len__(self) -> int:
        return len(self.time)

    def plan(self, i: int) -> ExecutionPlan:
        return self.batch.plan(i, tuple(int(a) for a in self.order[i]))

    def take(self, rows: np.ndarray) -> "ScoredPlans":
        return ScoredPlans(self.batch.take(rows), self.time[rows], self.memory[rows], self.order[rows])

    @staticmethod
    def concat(parts: list["ScoredPlans"], structure: PlanStructure) -> "ScoredPlans":
        parts = [p for p in parts if len(p)]
        if not parts:
            A, T = structure.num_axes, structure.num_tensors
            empty = PlanBatch(structure, np.ones((0, A), INT), np.ones((0, T, A), INT))
            return ScoredPlans(empty, np.zeros(0), np.zeros(0, INT), np.zeros((0, A), INT))
        batch = PlanBatch(structure, np.concatenate([p.batch.F for p in parts]),
                          np.concatenate([p.batch.ft for p in parts]))
        return ScoredPlans(batch, np.concatenate([p.time for p in parts]),
                           np.concatenate([p.memory for p in parts]),
                           np.concatenate([p.order for p in parts]))


# -- the candidate rows ----------------------------------------------------------------------
def candidate_partitions(structure: PlanStructure, max_cores: int,
                         filters: PlanFilters | None = None) -> np.ndarray:
    """F_op rows of the space, cut by the parallelism constraint and by a padding bound.

    The padding of a row's unrotated plan (``xp = ceil(E/F)``) is the least padding of any
    plan of that row, so rows above the threshold can go before expansion.
    """
    F = op_partitions(structure, max_cores)
    if filters is None or not len(F):
        return F
    cores = np.prod(F, axis=1)
    need = max(filters.min_cores, math.ceil(filters.min_core_utilization * int(cores.max()) - 1e-9))
    F = F[cores >= need]
    if math.isfinite(filters.max_padding_ratio):
        c = ceil_div(structure.extents[None, :], F)
        F = F[padding_ratio(structure, F, c) <= filters.max_padding_ratio + PADDING_SLACK]
    return F


def max_padding(filters: PlanFilters | None) -> float:
    return math.inf if filters is None else filters.max_padding_ratio


def score(batch: PlanBatch, model: BatchCostModel, budget: float,
          filters: PlanFilters | None = None, output_cap: float = math.inf) -> ScoredPlans:
    """Plans of ``batch`` that fit ``budget`` (and pass ``filters``), with their times;
    ``output_cap``: the most bytes per core the output's partition may take."""
    partitions = batch.partition_bytes()
    memory = partitions.sum(axis=1) + batch.structure.extra_bytes(batch.xp, batch.rp)
    keep = memory <= budget
    if math.isfinite(output_cap):
        keep &= partitions[:, -1] <= output_cap
    if filters is not None and math.isfinite(filters.max_padding_ratio):
        keep &= batch.padding() <= filters.max_padding_ratio + PADDING_SLACK
    rows = np.flatnonzero(keep)
    if len(rows) < len(batch):
        batch, memory = batch.take(rows), memory[rows]
    time, order = model.times(batch)
    return ScoredPlans(batch, time, memory, order)


def unrotated(structure: PlanStructure, F: np.ndarray) -> PlanBatch:
    return PlanBatch(structure, F, np.ones((len(F), structure.num_tensors, structure.num_axes), INT))



def plan_chunks(structure: PlanStructure, F: np.ndarray, rows: np.ndarray,
                cache: SearchMemo) -> Iterator[np.ndarray]:
    """Consecutive groups of ``rows`` holding about GROUP_PLANS plans each.

    Assignments are counted lazily, :data:`COUNT_ROWS` rows at a time, so rows after the
    group a caller stops at never pay for theirs.
    """
    P = sharing_counts(structure, F[rows]) if len(rows) else np.zeros((0, 0), INT)
    sizes = np.zeros(len(rows), INT)
    counted = 0
    start = 0
    grow = 2_000  # first groups small: a good incumbent early prunes the rest
    while start < len(rows):
        stop = start
        acc = 0
        while stop < len(rows) and acc < grow:
            if stop == counted:
                block = P[counted:counted + COUNT_ROWS]
                keys, inverse, _ = unique_rows(block)
                sizes[counted:counted + len(block)] = np.array(
                    assignment_counts(structure, keys, cache), INT)[inverse]
                counted += len(block)
            acc += int(sizes[stop])
            stop += 1
        yield rows[start:stop]
        start = stop
        grow = min(grow * 4, GROUP_PLANS)


def pareto_front(time: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """Indices of the Pareto-optimal points, fewest bytes (slowest) first.

    A point is kept iff it is strictly faster than every point with less or equal memory
    that comes before it in (memory, time) order.
    """
    if len(time) == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((time, memory))
    t = np.asarray(time, float)[order]
    best_before = np.minimum.accumulate(np.concatenate([[math.inf], t[:-1]]))
    return order[t < best_before]
