"""Choosing one execution plan per operator (T10 §4.3.1, simplified first stage).

For every operator partition F_op the search starts from the plan that replicates every
shared sub-tensor (fastest, most memory) and, while it does not fit a core's SRAM, splits the
tensor with the largest partition temporally, taking each time the split that costs least.
Among the plans that fit, the fastest under the cost model wins. The complete plan space and
Pareto frontier of T10 §4.3.1 replace this greedy stage in the optimizer; the interface
(:func:`plan_operator` returning a :class:`PlannedOp`) stays.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from runtime_sim.errors import InvalidPlanError, PlanNotFoundError
from runtime_sim.hardware import HardwareSpec
from runtime_sim.layout import OpLayout
from runtime_sim.program import ExecutionPlan, TensorExpr, dtype_bytes

from .cost import AnalyticCostModel, CostModel, PlanCost
from .space import (
    loop_orders,
    op_partitions,
    rotation_steps,
    unrotated,
    with_loop_order,
    with_temporal,
)

#: Operator partitions that proceed to the memory-fitting stage, best lower bound first.
_PARTITIONS_EXPLORED = 48


@dataclass(frozen=True)
class PlannedOp:
    """The plan chosen for an operator, its layout and its estimated cost."""

    expr: TensorExpr
    plan: ExecutionPlan
    layout: OpLayout
    cost: PlanCost
    memory_bytes_per_core: int

    @property
    def time_s(self) -> float:
        return self.cost.time_s


def plan_operator(
    expr: TensorExpr,
    hw: HardwareSpec,
    cost_model: CostModel | None = None,
    budget_bytes: int | None = None,
    name: str | None = None,
) -> PlannedOp:
    """Fastest plan of ``expr`` whose per-core footprint fits ``budget_bytes``.

    ``budget_bytes`` defaults to the SRAM per core left after the shift buffer. Raises
    :class:`PlanNotFoundError` naming the operator, the smallest footprint found and the
    budget when nothing fits.
    """
    cost_model = cost_model or AnalyticCostModel()
    budget = hw.usable_sram_bytes if budget_bytes is None else int(budget_bytes)
    label = name or expr.kind
    _check_fits_chip(expr, hw, budget, label)

    seeds = []
    for op_partition in op_partitions(expr, hw.num_cores):
        layout = OpLayout(expr, unrotated(expr, op_partition))
        seeds.append((cost_model(layout, hw).time_s, len(seeds), layout))
    best: PlannedOp | None = None
    smallest = math.inf
    for _, _, layout in heapq.nsmallest(_PARTITIONS_EXPLORED, seeds):
        fitted = _fit_memory(layout, hw, budget, cost_model)
        smallest = min(smallest, fitted.memory_bytes_per_core())
        if fitted.memory_bytes_per_core() > budget:
            continue
        candidate = _best_loop_order(fitted, hw, cost_model)
        if best is None or candidate.time_s < best.time_s:
            try:
                candidate.layout.validate()
            except InvalidPlanError:
                continue
            best = candidate
    if best is None:
        raise PlanNotFoundError(
            f"operator '{label}' ({expr}) has no execution plan that fits: the smallest "
            f"needs {int(smallest)} bytes per core, the budget is {budget} bytes per core "
            f"on {hw.num_cores} cores of '{hw.name}'"
        )
    return best


def _check_fits_chip(expr: TensorExpr, hw: HardwareSpec, budget: int, label: str) -> None:
    """A tensor larger than the whole chip can never fit, whatever the plan."""
    for access in expr.tensors:
        size = math.prod(access.shape) * dtype_bytes(access.dtype)
        if size > budget * hw.num_cores:
            raise PlanNotFoundError(
                f"operator '{label}': tensor '{access.name}' of shape {list(access.shape)} "
                f"({size} bytes) exceeds the on-chip memory of '{hw.name}' "
                f"({hw.num_cores} cores x {budget} bytes)"
            )


def _fit_memory(layout: OpLayout, hw: HardwareSpec, budget: int, cost_model: CostModel) -> OpLayout:
    """Split tensors temporally until the footprint fits (or no split is left)."""
    expr = layout.expr
    while layout.memory_bytes_per_core() > budget:
        options = []
        for t in range(len(expr.tensors)):
            for axis, factor in rotation_steps(layout, expr, t):
                trial = OpLayout(expr, with_temporal(layout.plan, t, axis, factor))
                saved = layout.memory_bytes_per_core() - trial.memory_bytes_per_core()
                if saved <= 0:
                    continue
                extra = cost_model(trial, hw).time_s
                fits = trial.memory_bytes_per_core() <= budget
                # Prefer a split that fits; otherwise the one that frees most memory per second.
                options.append((not fits, extra if fits else -saved / max(extra, 1e-12), trial))
        if not options:
            return layout
        layout = min(options, key=lambda o: (o[0], o[1]))[2]
    return layout


def _best_loop_order(layout: OpLayout, hw: HardwareSpec, cost_model: CostModel) -> PlannedOp:
    best = None
    for order in loop_orders(layout):
        candidate = OpLayout(layout.expr, with_loop_order(layout.plan, order))
        cost = cost_model(candidate, hw)
        if best is None or cost.time_s < best.cost.time_s:
            best = PlannedOp(layout.expr, candidate.plan, candidate, cost, candidate.memory_bytes_per_core())
    assert best is not None
    return best
