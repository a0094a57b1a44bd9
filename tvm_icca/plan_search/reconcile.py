"""Holistic inter-operator memory reconciliation: T10 Algorithm 1 (§4.3.2, Fig. 9, Fig. 19).

Every operator of a model keeps its resident tensors (weights) on chip between runs in an
*idle* plan and runs in an *active* plan; turning idle into active (the setup phase) moves
data between cores. A small idle plan leaves more memory to the operator that is running
but makes its setup slower; keeping an operator idle in its active layout makes setup free
at the price of idle memory that every other operator loses.

The model used here:

* ``idle_bytes`` of an option is what its resident tensors take per core in that layout;
  the idle memory is the sum over operators of their idle plans' ``idle_bytes``.
* An operator may run in an option whose extra footprint fits what the idle memory leaves:
  ``idle_memory + active_bytes <= capacity``, crediting its own ``idle_bytes`` when the
  active option *is* the idle one (the resident tensors are then already in place).
* Setup time is the bytes each core must receive divided by the link bandwidth
  (:func:`transfer_setup`); zero when idle and active options coincide.
* The estimated end-to-end time is the sum over operators of setup plus execution time.

:func:`reconcile` is Algorithm 1: start from the minimum-memory idle plan of every operator;
at every step pick, for each operator, its best active plan that fits (the one with the least
setup plus execution time: with zero setup, the fastest) and record the total; then grow the
idle plan of the operator whose next plan has the highest ``-dT_S / dM_I`` (setup saved per
idle byte added); keep the best total seen. It explores ``sum(options)`` combinations
instead of ``prod(options)``. :func:`reconcile_exhaustive` tries every idle combination and
is the reference the tests compare against.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from runtime_sim.contract.expr import TensorExpr, dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import IDLE_SPREAD
from runtime_sim.contract.relayout import canonical_grid, rests_spread
from tvm_icca.plan_search.batch_cost import AnalyticBatchModel, ArrivalCostModel
from tvm_icca.plan_search.filters import PlanFilters
from tvm_icca.plan_search.pareto import pareto_plan_sets
from tvm_icca.plan_search.search_memo import SearchMemo


@dataclass(frozen=True)
class PlanOption:
    """One plan of an operator as the reconciliation sees it."""

    time_s: float  # execution time in the active state
    active_bytes: int  # bytes per core while the operator runs
    idle_bytes: int  # bytes per core of its resident tensors while idle in this layout
    resident: tuple[int, ...] = ()  # per resident tensor, partition bytes per core
    # Per resident tensor: (F_op on its axes, its f_t on them); None when unknown.
    resident_layout: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] | None = None
    label: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class OpOptions:
    """An operator and its candidate plans (typically its Pareto plans, §4.3.1).

    ``count`` identical instances (the same operator in every layer of a model) share one
    decision: each holds its own idle memory and runs once, and all switch plans together.
    Per instance the greedy ratio ``-dT_S / dM_I`` is the same, so Algorithm 1 would grow
    them one after another anyway; the grouping only differs at the very last step, where
    part of a group might still have fit. ``capacity`` caps this operator's own active memory
    (e.g. a region's intermediates held on chip while it runs); ``None`` means the global one.
    """

    name: str
    options: tuple[PlanOption, ...]
    count: int = 1
    capacity: int | None = None


SetupModel = Callable[[PlanOption, PlanOption], float]


def transfer_setup(link_bandwidth: float) -> SetupModel:
    """Setup seconds = bytes a core receives to go from idle to active / link bandwidth.

    Per resident tensor: when the idle partition nests in the active one (same sub-tensors,
    i.e. same F_op on the tensor's axes, and active temporal factors dividing the idle ones)
    a core receives only the difference; otherwise it receives its whole active partition.
    Without layouts, the difference is used (a lower bound). Identical options move nothing.
    """

    def setup(idle: PlanOption, active: PlanOption) -> float:
        if idle == active:
            return 0.0
        if len(idle.resident) != len(active.resident):
            return max(0, active.idle_bytes - idle.idle_bytes) / link_bandwidth
        moved = 0
        for k, (i, a) in enumerate(zip(idle.resident, active.resident)):
            if idle.resident_layout is None or active.resident_layout is None:
                moved += max(0, a - i)
                continue
            (F_i, ft_i), (F_a, ft_a) = idle.resident_layout[k], active.resident_layout[k]
            nested = F_i == F_a and all(x % y == 0 for x, y in zip(ft_i, ft_a))
            moved += max(0, a - i) if nested else a
        return moved / link_bandwidth

    return setup


@dataclass(frozen=True)
class Reconciliation:
    """Per-operator idle and active option indices and the estimated end-to-end time."""

    idle: Mapping[str, int]
    active: Mapping[str, int]
    total_time_s: float
    idle_bytes: int
    setup_s: Mapping[str, float]
    trace: tuple[tuple[int, float], ...] = ()  # (idle bytes, total time) of every step


@dataclass(frozen=True)
class _Arrays:
    """One operator's options as arrays; ``setup[i, j]``: idle option i to active option j."""

    time: np.ndarray
    active: np.ndarray
    idle: np.ndarray
    setup: np.ndarray
    count: int
    capacity: float

    def best_active(self, rows: np.ndarray, idle_memory: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For idle options ``rows`` (with the model's idle memory ``idle_memory`` each): the
        best active option that fits, its setup seconds and setup + execution (inf: none)."""
        n = len(self.time)
        in_place = rows[:, None] == np.arange(n)[None, :]
        # running in its idle plan, the operator's resident tensors are already counted
        extra = self.active[None, :] - np.where(in_place, self.idle[None, :], 0)
        fits = idle_memory[:, None] + extra <= self.capacity
        cost = np.where(fits, self.setup[rows] + self.time[None, :], math.inf)
        best = np.argmin(cost, axis=1)
        pick = np.arange(len(rows))
        return best, self.setup[rows, best], cost[pick, best]


def _prepare(ops: Sequence[OpOptions], capacity: int, setup: SetupModel) -> list[_Arrays]:
    out = []
    for op in ops:
        opts = op.options
        cap = capacity if op.capacity is None else min(capacity, op.capacity)
        out.append(_Arrays(
            time=np.array([o.time_s for o in opts], float),
            active=np.array([o.active_bytes for o in opts], float),
            idle=np.array([o.idle_bytes for o in opts], float),
            setup=np.array([[setup(a, b) for b in opts] for a in opts], float).reshape(len(opts), len(opts)),
            count=int(op.count), capacity=float(cap)))
    return out


def _idle_memory(arrays: Sequence[_Arrays], idle: Sequence[int]) -> float:
    return float(sum(a.count * a.idle[i] for a, i in zip(arrays, idle)))


def _evaluate(arrays: Sequence[_Arrays], idle: Sequence[int], capacity: int
              ) -> tuple[float, list[int], list[float]]:
    memory = _idle_memory(arrays, idle)
    if memory > capacity:
        return math.inf, [], []
    total, active, setups = 0.0, [], []
    for a, i in zip(arrays, idle):
        best, s, cost = a.best_active(np.array([i]), np.array([memory]))
        if not math.isfinite(cost[0]):
            return math.inf, [], []
        active.append(int(best[0]))
        setups.append(float(s[0]))
        total += a.count * float(cost[0])
    return total, active, setups


def evaluate(ops: Sequence[OpOptions], idle: Sequence[int], capacity: int,
             setup: SetupModel) -> tuple[float, list[int], list[float]]:
    """Total time, active indices and setup times for given idle indices (inf: no fit)."""
    return _evaluate(_prepare(ops, capacity, setup), idle, capacity)


def _result(ops, arrays, idle, capacity, trace=()) -> Reconciliation:
    total, active, setups = _evaluate(arrays, idle, capacity)
    names = [op.name for op in ops]
    return Reconciliation(
        idle=dict(zip(names, idle)), active=dict(zip(names, active)), total_time_s=total,
        idle_bytes=int(_idle_memory(arrays, idle)), setup_s=dict(zip(names, setups)),
        trace=tuple(trace))


def reconcile(ops: Sequence[OpOptions], capacity_bytes: int, setup: SetupModel) -> Reconciliation:
    """T10 Algorithm 1: greedy idle-memory growth by setup time saved per idle byte."""
    ops = list(ops)
    if not ops:
        return Reconciliation({}, {}, 0.0, 0, {}, ())
    arrays = _prepare(ops, capacity_bytes, setup)
    # Line 3: the memory-efficient plan of every operator (the fastest among equals).
    idle = [int(np.lexsort((a.time, a.idle))[0]) for a in arrays]
    best_idle, best_time = list(idle), math.inf
    trace = []
    visited = {tuple(idle)}
    while True:
        memory = _idle_memory(arrays, idle)
        if memory > capacity_bytes:
            break
        total, _, _ = _evaluate(arrays, idle, capacity_bytes)
        trace.append((int(memory), total))
        if total < best_time:
            best_idle, best_time = list(idle), total
        # Line 15: the operator whose next idle plan saves most setup per added idle byte.
        choice = None
        for n, a in enumerate(arrays):
            current = idle[n]
            now = float(a.best_active(np.array([current]), np.array([memory]))[2][0])
            grow = a.idle - a.idle[current]
            after_memory = memory + a.count * grow
            rows = np.flatnonzero((grow >= 0) & (after_memory <= capacity_bytes)
                                  & (np.arange(len(grow)) != current))
            if not rows.size:
                continue
            # dT_S: what the operator's setup (plus run, when a better active plan becomes
            # reachable) saves with this idle plan; its active plan is re-chosen.
            _, _, after = a.best_active(rows, after_memory[rows])
            g = grow[rows]
            with np.errstate(invalid="ignore"):
                saved = now - after
                ratio = np.where(g > 0, saved / np.where(g > 0, g, 1), math.inf)
            usable = np.isfinite(after) & ((g > 0) | (saved > 0))
            for r in np.flatnonzero(usable)[np.lexsort((a.time[rows][usable], g[usable], -ratio[usable]))]:
                candidate = idle[:n] + [int(rows[r])] + idle[n + 1:]
                if tuple(candidate) in visited:
                    continue
                key = (float(ratio[r]), -float(g[r]), -float(a.time[rows[r]]))
                if choice is None or key > choice[0]:
                    choice = (key, candidate)
                break
        if choice is None:
            break
        idle = choice[1]
        visited.add(tuple(idle))
    return _result(ops, arrays, best_idle, capacity_bytes, trace)


def reconcile_exhaustive(ops: Sequence[OpOptions], capacity_bytes: int,
                         setup: SetupModel) -> Reconciliation:
    """The optimum over every combination of idle plans (for small op sets and tests)."""
    ops = list(ops)
    arrays = _prepare(ops, capacity_bytes, setup)
    best_idle, best_time = None, math.inf
    for idle in itertools.product(*[range(len(op.options)) for op in ops]):
        total, _, _ = _evaluate(arrays, idle, capacity_bytes)
        if total < best_time:
            best_idle, best_time = list(idle), total
    if best_idle is None:
        best_idle = [0] * len(ops)
    return _result(ops, arrays, best_idle, capacity_bytes)


def options_from_plans(expr: TensorExpr, plans: Sequence[Any], resident: Sequence[int],
                       num_cores: int) -> tuple[PlanOption, ...]:
    """Options of an operator from its plans (e.g. :func:`.pareto.pareto_plans` results).

    ``resident`` lists the indices (in ``expr.tensors``) of the tensors that stay on chip
    between runs, typically the weights. Each plan needs ``plan``, ``time_s`` and
    ``memory_bytes`` attributes.
    """
    out = []
    spread = _spread_parts(expr, resident, num_cores)
    # A gathered table rests spread whatever the plan (runtime_sim.contract.relayout.rests_spread): its
    # spread blocks count as idle memory, and also while the operator runs in place, since
    # the plan holds only the rows this call picks.
    resting = sum(b for t, b in zip(resident, spread) if rests_spread(expr, t))
    for p in plans:
        layout = OpLayout(expr, p.plan)
        parts = tuple(b if rests_spread(expr, t) else layout.partition_bytes(t)
                      for t, b in zip(resident, spread))
        shapes = tuple(((IDLE_SPREAD,), ()) if rests_spread(expr, t) else
                       (tuple(layout.F[a] for a in layout.tensor_axes(t)),
                        tuple(p.plan.ft(t, a) for a in layout.tensor_axes(t))) for t in resident)
        out.append(PlanOption(float(p.time_s), int(p.memory_bytes) + resting, int(sum(parts)), parts,
                              shapes, p))
    return tuple(out)


def _spread_parts(expr: TensorExpr, resident: Sequence[int], num_cores: int) -> list[int]:
    """Per resident tensor, its largest block per core cut near-evenly over all cores
    (:data:`runtime_sim.contract.plan.IDLE_SPREAD`)."""
    parts = []
    for t in resident:
        access = expr.tensors[t]
        grid = canonical_grid(tuple(access.shape), dtype_bytes(access.dtype), num_cores)
        parts.append(int(math.prod(grid.block)) * grid.itemsize)
    return parts


#: Relative time within which a candidate plan does not earn a place among an operator's
#: options: a 5% epsilon-Pareto set keeps the trade-offs that matter to Algorithm 1 and is
#: several times cheaper to compute than the exact frontier on tight SRAM budgets.
OPTION_TOLERANCE = 0.05


def operator_options(expr: TensorExpr, hw: HardwareSpec, resident: Sequence[int], budget_bytes: int,
                     cost_model: AnalyticBatchModel | None = None,
                     filters: PlanFilters | None = PlanFilters.t10(),
                     tolerance: float = OPTION_TOLERANCE,
                     arriving: Sequence[int] | None = None,
                     cache: SearchMemo | None = None) -> tuple[PlanOption, ...]:
    """Candidate idle/active plans of one operator for :func:`reconcile` (T10 §4.3.1-4.3.2).

    The union of two Pareto frontiers within ``budget_bytes``: time vs bytes per core (the
    active side: how much the running operator needs), and time vs the bytes of the
    ``resident`` tensors alone (the idle side: how cheaply its weights can wait, and the
    fastest plan that keeps them that small, which can then run with no setup). An operator
    without resident tensors has only the first. Times include the arrival of the
    ``arriving`` inputs (default: every input that is not resident) in the plan's placement
    (:class:`.batch_cost.ArrivalCostModel`). ``cache``: the caller's :class:`.search_memo.SearchMemo`.
    """
    if arriving is None:
        arriving = [t for t in range(len(expr.inputs)) if t not in set(resident)]
    model = ArrivalCostModel(cost_model or AnalyticBatchModel(hw), tuple(arriving), hw)
    objectives = [None, tuple(resident)] if resident else [None]
    sets = pareto_plan_sets(expr, hw, objectives, model, filters, budget_bytes, tolerance=tolerance,
                            cache=cache)
    plans = [p for plan_set in sets for p in plan_set]
    unique, seen = [], set()
    for p in sorted(plans, key=lambda p: (p.memory_bytes, p.time_s)):
        key = json.dumps(p.plan.to_dict(), sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(p)
    options = options_from_plans(expr, unique, resident, hw.num_cores)
    return options + ((spread_option(expr, resident, hw.num_cores),) if resident else ())


def spread_option(expr: TensorExpr, resident: Sequence[int], num_cores: int) -> PlanOption:
    """An idle-only option: the resident tensors cut into near-even blocks over all cores
    (:data:`runtime_sim.contract.plan.IDLE_SPREAD`), the least memory any operator can idle in --
    also for operators whose every plan holds a tensor whole on each core (a layer norm's
    scale and shift). It cannot run: setup from it moves every active partition."""
    parts = _spread_parts(expr, resident, num_cores)
    layout = tuple(((IDLE_SPREAD,), ()) for _ in resident)
    return PlanOption(math.inf, _NEVER_ACTIVE, int(sum(parts)), tuple(parts), layout, IDLE_SPREAD)


#: Active footprint of an idle-only option: it never fits any budget.
_NEVER_ACTIVE = 2 ** 62
