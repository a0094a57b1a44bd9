"""Size of the complete plan space of one operator, counted without listing it (T10 Fig. 17).

Assignments depend on ``F_op`` only through the sharing counts ``(P_T)``, and their number
only on the prime exponents of ``(P_T)``, so counts are memoized on that signature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.expr import TensorExpr
from tvm_icca.plan_search.intmath import INT, factor_tuples, factorize, unique_rows
from tvm_icca.plan_search.plan_space import iter_plan_chunks, op_partitions, sharing_counts
from tvm_icca.plan_search.structure import PlanStructure, build_structure

if TYPE_CHECKING:
    from tvm_icca.plan_search.search_memo import SearchMemo


@dataclass(frozen=True)
class SpaceSizes:
    """Plan-space sizes of one operator (T10 Fig. 17).

    Attributes
    ----------
    complete : int
        Valid plans counted with their loop orders: every (F_op, f_t, loop order) on up to
        ``max_cores`` cores (T10 Fig. 17's "complete space").
    complete_plans : int
        The same without loop orders: distinct (F_op, f_t) pairs.
    op_partitions : int
        Operator partitions F_op using at most ``max_cores`` cores.
    filtered : int or None
        (F_op, f_t) plans that pass T10's search constraints (and fit SRAM if asked), when
        counted (:func:`space_sizes`).
    pareto : int or None
        Time/memory Pareto-optimal plans among the filtered ones, when counted.
    """

    complete: int
    complete_plans: int
    op_partitions: int
    filtered: int | None = None
    pareto: int | None = None


def _signature(P: Sequence[int]) -> tuple:
    """Prime-relabelling invariant of a sharing tuple (assignment counts depend on it only).

    Renaming primes maps divisors to divisors, products to products and keeps
    divisibility, so two tuples whose per-prime exponent vectors agree up to order have as
    many assignments (and as many stepping axes in each).
    """
    exps: dict[int, list[int]] = {}
    for i, x in enumerate(P):
        for p, e in factorize(int(x)):
            exps.setdefault(p, [0] * len(P))[i] = e
    return tuple(sorted(tuple(v) for v in exps.values()))


def _weighted_count(structure: PlanStructure, key: Sequence[int]) -> tuple[int, int]:
    """(assignments, assignments weighted by loop orders) for one sharing tuple.

    Tensors are joined one at a time; once every tensor rotatable on an axis has been joined,
    the axis is closed: its values are dropped and only whether it steps (some factor > 1)
    is kept as a count of stepping axes, so the tables stay small.
    """
    n_t, n_a = structure.num_tensors, structure.num_axes
    rot = structure.rotatable
    order = sorted(range(n_t), key=lambda t: len(factor_tuples(int(key[t]), int(rot[t].sum()))))
    remaining = {a: set(np.flatnonzero(rot[:, a]).tolist()) for a in range(n_a)}
    # Table columns: the open (tensor, axis) variables; plus 'steps' = closed stepping axes.
    cols: list[tuple[int, int]] = []
    vals = np.zeros((1, 0), INT)
    steps = np.zeros(1, INT)
    # Per sharing tuple the counts stay far below 2**63 (at most the product of the
    # tensors' option counts); totals over F_op are summed as Python integers.
    weight = np.ones(1, INT)
    for t in order:
        axes_t = [int(a) for a in np.flatnonzero(rot[t])]
        P = int(key[t])
        if P > 1 and axes_t:
            opts = factor_tuples(P, len(axes_t))
        else:
            opts = np.ones((1, len(axes_t)), INT)
        n = len(vals)
        vals = np.concatenate([np.repeat(vals, len(opts), axis=0), np.tile(opts, (n, 1))], axis=1)
        steps = np.repeat(steps, len(opts))
        weight = np.repeat(weight, len(opts))
        new_cols = [(t, a) for a in axes_t]
        ok = np.ones(len(vals), bool)
        for j, (_, a) in enumerate(new_cols):
            x = vals[:, len(cols) + j]
            for i, (u, b) in enumerate(cols):
                if b == a:
                    y = vals[:, i]
                    ok &= (x % y == 0) | (y % x == 0)
        cols = cols + new_cols
        vals, steps, weight = vals[ok], steps[ok], weight[ok]
        for a in axes_t:
            remaining[a].discard(t)
        closing = [a for a in set(axes_t) if not remaining[a]]
        if closing:
            drop = [i for i, (_, b) in enumerate(cols) if b in closing]
            for a in closing:
                on_a = [i for i, (_, b) in enumerate(cols) if b == a]
                steps = steps + (vals[:, on_a].max(axis=1) > 1)
            keep = [i for i in range(len(cols)) if i not in drop]
            cols = [cols[i] for i in keep]
            vals = vals[:, keep]
            # Aggregate identical rows so the next join multiplies fewer rows.
            table = np.concatenate([vals, steps[:, None]], axis=1)
            uniq, inv, _ = unique_rows(table)
            agg = np.zeros(len(uniq), INT)
            np.add.at(agg, inv, weight)
            vals, steps, weight = uniq[:, :-1], uniq[:, -1], agg
    plans = int(weight.sum())
    with_orders = 0
    for k in np.unique(steps):
        with_orders += int(weight[steps == k].sum()) * math.factorial(int(k))
    return plans, with_orders


def count_complete_space(structure: PlanStructure | TensorExpr, max_cores: int,
                         cache: "SearchMemo | None" = None) -> SpaceSizes:
    """Count the complete plan space of one operator without listing it (T10 Fig. 17).

    The complete space holds every valid compute-shift plan (T10 §4.2): each operator
    partition F_op on at most ``max_cores`` cores, each assignment of temporal factors f_t
    to its tensors that T10's rules allow, and each order of the loops that take steps.

    Parameters
    ----------
    structure : PlanStructure or TensorExpr
        The operator: its tensor expression (e.g. ``op.expr`` of a device program's
        operator) or the :class:`PlanStructure` built from it.
    max_cores : int
        The most cores a plan may use (``hw.num_cores``).
    cache : SearchMemo, optional
        A memo shared with other searches of the same operator.

    Returns
    -------
    SpaceSizes
        ``complete``, ``complete_plans`` and ``op_partitions`` (``filtered`` and ``pareto``
        are left ``None``; :func:`space_sizes` counts those too).

    Raises
    ------
    IccaError
        ``structure`` is neither, or ``max_cores`` is not a positive integer.
    """
    if isinstance(max_cores, bool) or not isinstance(max_cores, (int, np.integer)) or max_cores < 1:
        raise IccaError(f"max_cores must be a positive number of cores, got {max_cores!r}")
    if isinstance(structure, TensorExpr):
        structure = build_structure(structure) if cache is None else cache.structure(structure)
    elif not isinstance(structure, PlanStructure):
        raise IccaError("count_complete_space needs a TensorExpr or a PlanStructure, got "
                        f"{type(structure).__name__}")
    F = op_partitions(structure, max_cores)
    if structure.exact.any() or structure.ring_risks:
        # These rules depend on F_op itself: count by listing (such operators are small).
        plans = orders = 0
        for batch in iter_plan_chunks(structure, F, cache=cache):
            plans += len(batch)
            stepping = (batch.S > 1).sum(axis=1)
            orders += int(sum(math.factorial(int(k)) * int(c) for k, c in
                              zip(*np.unique(stepping, return_counts=True))))
        return SpaceSizes(orders, plans, len(F))
    P = sharing_counts(structure, F)
    keys, _, counts = unique_rows(P)
    memo: dict[tuple, tuple[int, int]] = {}
    plans = orders = 0
    for key, n in zip(keys, counts):
        sig = _signature(key)
        if sig not in memo:
            memo[sig] = _weighted_count(structure, key)
        p, o = memo[sig]
        plans += p * int(n)
        orders += o * int(n)
    return SpaceSizes(orders, plans, len(F))
