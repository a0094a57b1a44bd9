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
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from runtime_sim.layout import OpLayout
from runtime_sim.program import TensorExpr


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
    """An operator and its candidate plans (typically its Pareto plans, §4.3.1)."""

    name: str
    options: tuple[PlanOption, ...]


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


def _best_active(op: OpOptions, idle_index: int, idle_memory: int, capacity: int,
                 setup: SetupModel) -> tuple[int, float, float] | None:
    """(index, setup s, setup + execution s) of the op's best active option that fits."""
    idle = op.options[idle_index]
    best = None
    for j, option in enumerate(op.options):
        extra = option.active_bytes - (option.idle_bytes if j == idle_index else 0)
        if idle_memory + extra > capacity:
            continue
        s = setup(idle, option)
        total = s + option.time_s
        if best is None or total < best[2] - 1e-18:
            best = (j, s, total)
    return best


def evaluate(ops: Sequence[OpOptions], idle: Sequence[int], capacity: int,
             setup: SetupModel) -> tuple[float, list[int], list[float]]:
    """Total time, active indices and setup times for given idle indices (inf: no fit)."""
    idle_memory = sum(op.options[i].idle_bytes for op, i in zip(ops, idle))
    if idle_memory > capacity:
        return math.inf, [], []
    total, active, setups = 0.0, [], []
    for op, i in zip(ops, idle):
        best = _best_active(op, i, idle_memory, capacity, setup)
        if best is None:
            return math.inf, [], []
        active.append(best[0])
        setups.append(best[1])
        total += best[2]
    return total, active, setups


def _result(ops, idle, capacity, setup, trace=()) -> Reconciliation:
    total, active, setups = evaluate(ops, idle, capacity, setup)
    names = [op.name for op in ops]
    return Reconciliation(
        idle=dict(zip(names, idle)), active=dict(zip(names, active)), total_time_s=total,
        idle_bytes=sum(op.options[i].idle_bytes for op, i in zip(ops, idle)),
        setup_s=dict(zip(names, setups)), trace=tuple(trace))


def reconcile(ops: Sequence[OpOptions], capacity_bytes: int, setup: SetupModel) -> Reconciliation:
    """T10 Algorithm 1: greedy idle-memory growth by setup time saved per idle byte."""
    ops = list(ops)
    if not ops:
        return Reconciliation({}, {}, 0.0, 0, {}, ())
    # Line 3: the memory-efficient plan of every operator (the fastest among equals).
    idle = [min(range(len(op.options)), key=lambda j, op=op: (op.options[j].idle_bytes, op.options[j].time_s))
            for op in ops]
    best_idle, best_time = list(idle), math.inf
    trace = []
    visited = {tuple(idle)}
    while True:
        idle_memory = sum(op.options[i].idle_bytes for op, i in zip(ops, idle))
        if idle_memory > capacity_bytes:
            break
        total, active, _ = evaluate(ops, idle, capacity_bytes, setup)
        trace.append((idle_memory, total))
        if total < best_time:
            best_idle, best_time = list(idle), total
        # Line 15: the operator whose next idle plan saves most setup per added idle byte.
        choice = None
        for n, op in enumerate(ops):
            current = op.options[idle[n]]
            now = _best_active(op, idle[n], idle_memory, capacity_bytes, setup)
            for j, option in enumerate(op.options):
                grow = option.idle_bytes - current.idle_bytes
                if j == idle[n] or grow < 0 or idle_memory + grow > capacity_bytes:
                    continue
                # dT_S: what the operator's setup (plus run, when a better active plan
                # becomes reachable) saves with this idle plan; its active plan is re-chosen.
                after = _best_active(op, j, idle_memory + grow, capacity_bytes, setup)
                if after is None:
                    continue
                saved = (now[2] if now is not None else math.inf) - after[2]
                if grow == 0:
                    if saved <= 0:
                        continue
                    ratio = math.inf
                else:
                    ratio = saved / grow
                key = (ratio, -grow, -option.time_s)
                candidate = idle[:n] + [j] + idle[n + 1:]
                if tuple(candidate) in visited:
                    continue
                if choice is None or key > choice[0]:
                    choice = (key, candidate)
        if choice is None:
            break
        idle = choice[1]
        visited.add(tuple(idle))
    return _result(ops, best_idle, capacity_bytes, setup, trace)


def reconcile_exhaustive(ops: Sequence[OpOptions], capacity_bytes: int,
                         setup: SetupModel) -> Reconciliation:
    """The optimum over every combination of idle plans (for small op sets and tests)."""
    ops = list(ops)
    best_idle, best_time = None, math.inf
    for idle in itertools.product(*[range(len(op.options)) for op in ops]):
        total, _, _ = evaluate(ops, idle, capacity_bytes, setup)
        if total < best_time:
            best_idle, best_time = list(idle), total
    if best_idle is None:
        best_idle = [0] * len(ops)
    return _result(ops, best_idle, capacity_bytes, setup)


def options_from_plans(expr: TensorExpr, plans: Sequence[Any], resident: Sequence[int],
                       ) -> tuple[PlanOption, ...]:
    """Options of an operator from its plans (e.g. :func:`.pareto.pareto_plans` results).

    ``resident`` lists the indices (in ``expr.tensors``) of the tensors that stay on chip
    between runs, typically the weights. Each plan needs ``plan``, ``time_s`` and
    ``memory_bytes`` attributes.
    """
    out = []
    for p in plans:
        layout = OpLayout(expr, p.plan)
        parts = tuple(layout.partition_bytes(t) for t in resident)
        shapes = tuple((tuple(layout.F[a] for a in layout.tensor_axes(t)),
                        tuple(p.plan.ft(t, a) for a in layout.tensor_axes(t))) for t in resident)
        out.append(PlanOption(float(p.time_s), int(p.memory_bytes), int(sum(parts)), parts, shapes, p))
    return tuple(out)
