"""The per-core layout of one plan, or of many plans of one expression, on arrays.

The grid, the rotation rings, the Cannon skew and the partitions of T10 §4.2 and §4.4
("Sub-tensor placement"), as :mod:`runtime_sim.contract.layout` states them: that module's
:class:`~runtime_sim.contract.layout.OpLayout` reads them from a :class:`CoreLayout` of its
one plan, and a plan space builds one over thousands of candidate plans to decide the ring
rule of all of them at once (:func:`runtime_sim.contract.layout_checks.rings_hold`).
"""

from __future__ import annotations

from functools import cached_property
from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["CoreLayout", "ring_counts", "temporal_steps"]


def temporal_steps(ft: np.ndarray) -> np.ndarray:
    """``S_a``: temporal steps on each axis, the largest f_t of any tensor on it (1 where
    none rotates), of temporal factors ``ft`` (..., T, A) -> (..., A)."""
    # (a ufunc reduction: np.max costs several times more on one plan's few axes)
    return np.maximum.reduce(ft, axis=-2, initial=1)


def ring_counts(own: np.ndarray, F: np.ndarray, ft: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``P_T``, the cores that share one sub-tensor of tensor ``t`` (they differ only on the
    axes ``t`` lacks), and ``R_T = prod f_t``, the cores of one of its rotation rings, of
    plans ``F`` (n, A) with temporal factors ``ft`` (n, T, A), tensor ``t`` indexed by the
    axes ``own[t]`` (T, A): two (n, T) arrays."""
    return (np.multiply.reduce(np.where(own, 1, F[:, None, :]), axis=2),
            np.multiply.reduce(ft, axis=2))


class _PlanTables(NamedTuple):
    """What a :class:`CoreLayout` reads per plan and per tensor before laying out its cores."""

    sharing: np.ndarray  # (n, T): P_T
    ring_size: np.ndarray  # (n, T): R_T
    ft: np.ndarray  # (T, A, C): f_t at every core
    span: np.ndarray  # (T, A, C): S / f_t at every core, chunks of an axis in one partition
    rotating: list[list[int]]  # per tensor, the axes it rotates on in some plan


class CoreLayout:
    """Where the cores of one plan, or of many plans of one expression, sit: the grid, the
    rotation rings, the Cannon skew and the partitions of T10 §4.2 and §4.4 ("Sub-tensor
    placement"), as the module docstring states them, on arrays.

    This is the one definition of the per-core layout. :class:`OpLayout` reads its grid,
    rings, offsets and partition keys from one of these (``n = 1``); a plan space builds one
    for thousands of candidate plans to decide the ring rule of all of them in a few dozen
    array operations (:func:`runtime_sim.contract.layout_checks.rings_hold`). The cores of
    plan ``i`` are numbered ``0 .. prod F[i] - 1`` and follow those of plan ``i - 1`` in every
    per-core array (``C`` cores in all). Per-core arrays are computed on first use.

    Parameters
    ----------
    own : numpy.ndarray
        (T, A) bool: whether tensor ``t`` is indexed by top-level axis ``a``
        (:meth:`OpLayout.tensor_axes`).
    F : numpy.ndarray
        (n, A): each plan's F_op.
    ft : numpy.ndarray
        (n, T, A): each plan's temporal factors, 1 where it gives none.
    order : sequence of int, optional
        The plans' core order as axis numbers, outermost first (a plan's ``core_order``);
        by default the axes in order.

    Attributes
    ----------
    S : numpy.ndarray
        (n, A): temporal steps on each axis (:func:`temporal_steps`).
    cores : numpy.ndarray
        (n,): cores of each plan, the product of its F_op.
    num_plans : int
        n.
    """

    def __init__(self, own: np.ndarray, F: np.ndarray, ft: np.ndarray,
                 order: Sequence[int] | None = None):
        self.own = np.asarray(own, bool)
        self.F = np.asarray(F, np.int64)
        self.ft = np.asarray(ft, np.int64)
        self.order = list(range(self.F.shape[1])) if order is None else list(order)
        self.S = temporal_steps(self.ft)
        self.cores = np.multiply.reduce(self.F, axis=1)
        self.num_plans = len(self.F)

    @property
    def sharing(self) -> np.ndarray:
        """(n, T): P_T (:func:`ring_counts`)."""
        return self._tables.sharing

    @property
    def ring_size(self) -> np.ndarray:
        """(n, T): R_T (:func:`ring_counts`)."""
        return self._tables.ring_size

    @cached_property
    def _tables(self) -> _PlanTables:
        """P_T, R_T, f_t and S / f_t at every core, and the axes each tensor rotates on in some
        plan (elsewhere its partition is 0): one cached property (the first use of each costs
        a lock)."""
        sharing, ring_size = ring_counts(self.own, self.F, self.ft)
        rotating = [[a for a, r in enumerate(row) if r] for row in (self.ft > 1).any(axis=0).tolist()]
        return _PlanTables(sharing, ring_size, self.at_cores(self.ft),
                           self.at_cores(self.S[:, None, :] // self.ft), rotating)

    @cached_property
    def replicas(self) -> np.ndarray:
        """(n, T): rotation rings of tensor ``t``, copies of each sub-tensor (P_T / R_T)."""
        # (a factor below 1 is refused by check_layout, not divided by here)
        return self.sharing // np.maximum(self.ring_size, 1)

    def at_cores(self, per_plan: np.ndarray) -> np.ndarray:
        """Per-plan values ``(n, ...)`` at every core, ``(..., C)``: a plan's value at each of
        its cores (``(..., 1)`` for one plan, which broadcasts against per-core arrays)."""
        values = np.asarray(per_plan)
        values = values.transpose(tuple(range(1, values.ndim)) + (0,))
        return values if self.num_plans == 1 else values[..., self.plan]

    @cached_property
    def plan(self) -> np.ndarray:
        """(C,): the plan of each core."""
        return np.repeat(np.arange(self.num_plans), self.cores)

    @cached_property
    def grid(self) -> np.ndarray:
        """(A, C): ``g[a](c)``, the sub-operator index of each core on each axis. A plan's
        cores are numbered row-major over the axes in the core order, outermost first."""
        core = np.arange(int(self.cores.sum()), dtype=np.int64)
        grid = np.empty((self.F.shape[1], len(core)), np.int64)
        if not len(grid):                    # a scalar operator: one core, no axis to number
            return grid
        if self.num_plans == 1:              # numpy's unravel: the same numbering, one call
            digits = np.unravel_index(core, self.F[0, self.order].tolist())
            for a, d in zip(self.order, digits):
                grid[a] = d
            return grid
        core -= (np.cumsum(self.cores) - self.cores)[self.plan]          # from each plan's first
        F = self.at_cores(self.F)
        for a in self.order[::-1]:                                      # last digit first
            core, grid[a] = np.divmod(core, F[a])
        return grid

    @cached_property
    def _rings(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sub-tensor (T, C), ring (T, C), offset (A, C)). The cores that differ only on the
        axes tensor ``t`` lacks share a sub-tensor; numbered row-major over those axes, they
        form consecutive rings of R_T cores. A core's ring position, as digits over ``t``'s
        temporal axes (radix f_t), skews its chunks on each by ``S / f_t`` per digit (Cannon)."""
        grid, F, tables = self.grid, self.at_cores(self.F), self._tables
        ft, span = tables.ft, tables.span
        T, (A, C) = len(self.own), grid.shape
        split = [a for a, f in enumerate((self.F > 1).any(axis=0).tolist()) if f]  # grid 0 elsewhere
        sub = np.empty((T, C), np.int64)
        ring = np.empty((T, C), np.int64)
        offset = np.zeros((A, C), np.int64)
        R = self.at_cores(self.ring_size)
        for t, (own, rotating) in enumerate(zip(self.own.tolist(), tables.rotating)):
            mine, g_free = 0, 0                 # row-major over t's own axes, over the others
            for a in split:
                if own[a]:
                    mine = mine * F[a] + grid[a]
                else:
                    g_free = g_free * F[a] + grid[a]
            sub[t] = mine
            pos = g_free % R[t]
            ring[t] = g_free // R[t]
            for a in rotating[::-1]:                                    # last digit first
                pos, digit = np.divmod(pos, ft[t, a])
                offset[a] += span[t, a] * digit
        return sub, ring, offset % self.at_cores(self.S)

    @property
    def subtensor(self) -> np.ndarray:
        """(T, C): which sub-tensor of each tensor each core holds."""
        return self._rings[0]

    @property
    def ring(self) -> np.ndarray:
        """(T, C): each core's rotation ring of each tensor, among its sub-tensor's replicas."""
        return self._rings[1]

    @property
    def offset(self) -> np.ndarray:
        """(A, C): ``off_a(c)``, the Cannon-style skew of each core's chunk schedule; also
        ``q_a`` at the first step."""
        return self._rings[2]

    def span(self, t: int) -> np.ndarray:
        """(A, C): chunks of each axis in one partition of tensor ``t`` (``S / f_t``)."""
        return self._tables.span[t]

    def partition(self, t: int, q: np.ndarray, axes: int | Sequence[int] | None = None) -> np.ndarray:
        """(A, C): ``p_a``, the partition of tensor ``t`` each core holds at chunks ``q`` (A, C)
        (0 on axes ``t`` does not rotate on); or on ``axes`` only (an axis: (C,)), ``q``
        given on them."""
        return q // (self.span(t) if axes is None else self.span(t)[axes])

    def partition_key(self, t: int) -> np.ndarray:
        """(C,): an id of the partition of tensor ``t`` each core holds at its first step:
        cores of one plan with equal ids are replicas of one partition (T10 §4.2)."""
        sub, _, q0 = self._rings
        key = sub[t] * self.at_cores(self.ring_size[:, t])
        rotating = self._tables.rotating[t]
        if rotating:
            p0 = self.partition(t, q0[rotating], rotating)
            ft, digits = self._tables.ft[t], 0
            for a, p in zip(rotating, p0):      # row-major over t's temporal axes (radix f_t)
                digits = digits * ft[a] + p
            key = key + digits
        return key

    def group_key(self, t: int) -> np.ndarray:
        """(C,): an id of the (sub-tensor, ring) of tensor ``t`` of each core in its plan."""
        return self.subtensor[t] * self.at_cores(np.maximum(self.replicas[:, t], 1)) + self.ring[t]
