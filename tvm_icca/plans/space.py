"""Hand-sized candidate plans of one operator (T10 §4.2-§4.3.1), one plan at a time.

These helpers propose a few ``F_op`` values per axis, single temporal splits and loop
orders, for hand-driven experiments. The search itself uses the complete, vectorized plan
space of :mod:`tvm_icca.plans.enumerate`. Whether a plan obeys the T10 rules is decided by
:meth:`runtime_sim.layout.OpLayout.validate`, the single definition of plan semantics.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterator, Mapping, Sequence

from runtime_sim.layout import OpLayout, pinned_axes
from runtime_sim.program import ExecutionPlan, TensorExpr


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def axis_factor_candidates(extent: int, max_cores: int, limit: int = 12) -> list[int]:
    """F_op values worth trying on one axis: divisors of the extent and powers of two.

    Divisors avoid padding; powers of two reach core counts that share factors with other
    axes. At most ``limit`` values, spread evenly on a log scale, always with 1 and the
    largest.
    """
    cap = min(extent, max_cores)
    values = {d for d in divisors(extent) if d <= cap}
    values.update(1 << i for i in range(cap.bit_length()) if (1 << i) <= cap)
    ordered = sorted(values)
    if len(ordered) <= limit:
        return ordered
    picks = {ordered[0], ordered[-1]}
    for i in range(1, limit - 1):
        target = math.exp(math.log(ordered[-1]) * i / (limit - 1))
        picks.add(min(ordered, key=lambda v: abs(math.log(v) - math.log(target))))
    return sorted(picks)


def op_partitions(expr: TensorExpr, max_cores: int) -> Iterator[dict[str, int]]:
    """Every combination of per-axis candidates whose product fits ``max_cores``."""
    pinned = pinned_axes(expr)
    axes = [a for a in expr.axes]
    options = [
        [1] if a.name in pinned else axis_factor_candidates(a.extent, max_cores) for a in axes
    ]

    def rec(i: int, used: int, chosen: dict[str, int]) -> Iterator[dict[str, int]]:
        if i == len(axes):
            yield dict(chosen)
            return
        for f in options[i]:
            if used * f > max_cores:
                break
            chosen[axes[i].name] = f
            yield from rec(i + 1, used * f, chosen)
        chosen.pop(axes[i].name, None)

    yield from rec(0, 1, {})


def rotatable_axes(expr: TensorExpr, t: int) -> list[str]:
    """Axes along which tensor ``t`` may rotate: its simply indexed, unpinned axes."""
    if t in expr.epilogue_inputs:
        return []
    pinned = pinned_axes(expr)
    access = expr.tensors[t]
    simple = [i.terms[0][0] for i in access.indices if i.is_simple]
    return [a for a in simple if a not in pinned and sum(a in i.axes for i in access.indices) == 1]


def rotation_steps(
    layout: OpLayout, expr: TensorExpr, t: int
) -> list[tuple[str, int]]:
    """Ways to split tensor ``t`` further: (axis, new temporal factor) pairs.

    The new factor keeps prod f_t a divisor of the sharing count and stays a factor or
    multiple of every other tensor's factor on that axis (T10 §4.2 alignment rules).
    """
    plan = layout.plan
    share = layout.sharing(t)
    ring = layout.ring_size(t)
    moves = []
    for a in rotatable_axes(expr, t):
        current = plan.ft(t, a)
        others = [plan.ft(u, a) for u in range(len(expr.tensors)) if u != t]
        for grow in divisors(share // ring):
            if grow == 1:
                continue
            new = current * grow
            if new > layout.extent[a]:
                break
            if all(new % o == 0 or o % new == 0 for o in others):
                moves.append((a, new))
    return moves


def with_temporal(plan: ExecutionPlan, t: int, axis: str, factor: int) -> ExecutionPlan:
    temporal = [dict(x) for x in plan.temporal]
    temporal[t][axis] = factor
    return ExecutionPlan(dict(plan.op_partition), tuple(temporal), ())


def loop_orders(layout: OpLayout, max_permutations: int = 24) -> Iterator[tuple[str, ...]]:
    """Loop orders of the temporal axes, outermost first.

    All permutations when there are few; otherwise T10's rule (§4.4): the axis of the
    tensors with the fewest bytes to move goes innermost, since the inner loop runs most.
    """
    axes = [a for a in layout.axes if layout.S[a] > 1]
    if math.factorial(len(axes)) <= max_permutations:
        yield from itertools.permutations(axes)
        return

    def moving_bytes(a: str) -> int:
        return sum(
            layout.partition_bytes(t) for t in range(len(layout.expr.tensors)) if layout.plan.ft(t, a) > 1
        )

    yield tuple(sorted(axes, key=moving_bytes, reverse=True))


def with_loop_order(plan: ExecutionPlan, order: Sequence[str]) -> ExecutionPlan:
    return ExecutionPlan(dict(plan.op_partition), tuple(dict(t) for t in plan.temporal), tuple(order))


def unrotated(expr: TensorExpr, op_partition: Mapping[str, int]) -> ExecutionPlan:
    return ExecutionPlan(dict(op_partition), tuple({} for _ in expr.tensors), ())
