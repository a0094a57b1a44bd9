"""The complete plan space of one operator, enumerated with numpy (T10 §4.2, §4.3.1, §5).

A plan is ``F_op`` (one factor per axis of the tensor expression, compound convolution axes
partitioned per basic axis as T10 §5 does), a temporal factor ``f_t`` per tensor per axis and
a loop order of the axes that take temporal steps. The rotating pace is not a free choice in
our device format: like T10 (§4.2, "T10 designates the rp as the minimum of the sub-tensor
partition lengths") it is derived, ``rp = xp / S`` (:mod:`runtime_sim.layout`).

Validity is :meth:`runtime_sim.layout.OpLayout.validate`, mirrored rule by rule on arrays of
candidates:

* ``1 <= F_a <= extent_a``; pinned axes (sharing a dimension with a core-local axis) keep
  ``F_a = 1`` and never rotate;
* a tensor rotates only on axes that index exactly one of its dimensions, with coefficient 1
  and no offset, and never when it is an epilogue input;
* ``prod f_t`` of a tensor divides ``P_T``, the number of cores sharing each sub-tensor;
* on every axis the temporal factors of all tensors are pairwise factor/multiple;
* reduction axes of bodies that zero padding would corrupt are never padded;
* rotation rings must hold each partition once and shift in step (``_check_rings``). That
  check can only fail when two tensors rotating on one axis are both missing an axis with
  ``F > 1`` (otherwise the other tensor's skew is constant along the ring); such candidates,
  rare in practice, are checked one by one with :class:`OpLayout` itself.

Candidates are built as arrays: every ``F_op`` tuple first, then for every distinct tuple of
sharing counts ``(P_T)`` the ``f_t`` assignments, joined tensor by tensor with the alignment
rule applied after each join. The complete space is counted, not listed (it reaches 1e19 in
T10 Fig. 17): assignments depend on ``F_op`` only through ``(P_T)``, and their number only on
the prime exponents of ``(P_T)``, so counts are memoized on that signature.

The two search constraints of T10 §4.3.1 are :class:`PlanFilters`.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Iterable, Sequence

import numpy as np

from runtime_sim.errors import InvalidPlanError
from runtime_sim.layout import OpLayout, padding_safe_reduce, pinned_axes
from runtime_sim.program import ExecutionPlan, TensorExpr, dtype_bytes

INT = np.int64


# -- filters (T10 §4.3.1 "Search constraints") ------------------------------------------------
@dataclass(frozen=True)
class PlanFilters:
    """T10's two user-configurable search constraints (§4.3.1), plus an SRAM fit option.

    * Parallelism: a plan must use at least ``min_cores`` cores and at least
      ``min_core_utilization`` of the most cores the operator can use at all
      (``min(hardware cores, largest feasible prod F_op)``): a tiny operator is not asked to
      fill a chip it cannot fill.
    * Padding: the padded iteration space ``prod_a F_a * xp_a`` may exceed the original
      ``prod_a extent_a`` by at most ``max_padding_ratio``.
    * ``fit_sram``: drop plans whose partitions exceed a core's usable SRAM (they can never
      run, whatever the other operators do).

    :meth:`t10` gives the thresholds of the public Elk artifact (core utilization 0.9, padding
    0.9, i.e. at least 90% of the padded space is real: ``shared/hardware.md``).
    """

    min_core_utilization: float = 0.0
    min_cores: int = 1
    max_padding_ratio: float = math.inf
    fit_sram: bool = True

    @classmethod
    def t10(cls, utilization: float = 0.9, padding: float = 0.9) -> "PlanFilters":
        """The Elk artifact's thresholds (``shared/hardware.md``): 0.9 and 0.9."""
        return cls(min_core_utilization=utilization, max_padding_ratio=1.0 / padding)

    @classmethod
    def none(cls) -> "PlanFilters":
        """No search constraint: the complete space (only plans that fit SRAM)."""
        return cls()


# -- static structure of an operator ---------------------------------------------------------
@dataclass(frozen=True, eq=False)
class PlanStructure:
    """What plan validity and cost need to know about a tensor expression, as arrays.

    Axes are in ``expr.axes`` order, tensors in ``expr.tensors`` order (inputs then output).
    """

    expr: TensorExpr
    axes: tuple[str, ...]
    extents: np.ndarray  # (A,)
    pinned: np.ndarray  # (A,) bool
    exact: np.ndarray  # (A,) bool: reduction axes that must not be padded
    own: np.ndarray  # (T, A) bool: tensor t is indexed by axis a
    rotatable: np.ndarray  # (T, A) bool: tensor t may rotate on axis a
    ring_risks: tuple[tuple[int, int, int, np.ndarray], ...]  # (axis, t, u, shared free mask)
    dims: tuple[tuple[tuple, ...], ...]  # per tensor, per dimension: how its length derives
    elem_bytes: np.ndarray  # (T,)
    _combo_cache: "OrderedDict[tuple, Assignments]" = field(default_factory=OrderedDict, repr=False)
    _combo_elements: list = field(default_factory=lambda: [0], repr=False)

    @property
    def num_axes(self) -> int:
        return len(self.axes)

    @property
    def num_tensors(self) -> int:
        return len(self.expr.tensors)


_STRUCTURES: "OrderedDict[str, PlanStructure]" = OrderedDict()


def expr_key(expr: TensorExpr) -> str:
    """A hashable identity of a tensor expression (its canonical JSON)."""
    return json.dumps(expr.to_dict(), sort_keys=True, separators=(",", ":"))


def plan_structure(expr: TensorExpr) -> PlanStructure:
    """The :class:`PlanStructure` of ``expr`` (memoized: the search calls this per operator)."""
    key = expr_key(expr)
    hit = _STRUCTURES.get(key)
    if hit is not None:
        _STRUCTURES.move_to_end(key)
        return hit
    structure = _build_structure(expr)
    _STRUCTURES[key] = structure
    while len(_STRUCTURES) > 256:
        _STRUCTURES.popitem(last=False)
    return structure


def _build_structure(expr: TensorExpr) -> PlanStructure:
    axes = expr.axis_names
    index = {a: i for i, a in enumerate(axes)}
    local = {a.name: a.extent for a in expr.local_axes}
    pinned = pinned_axes(expr)
    n_t, n_a = len(expr.tensors), len(axes)
    own = np.zeros((n_t, n_a), bool)
    rot = np.zeros((n_t, n_a), bool)
    dims = []
    for t, access in enumerate(expr.tensors):
        for a in access.axes:
            if a in index:
                own[t, index[a]] = True
        for a in access.axes:
            if a not in index or a in pinned or t in expr.epilogue_inputs:
                continue
            using = [i for i in access.indices if a in i.axes]
            if len(using) == 1 and using[0].is_simple:
                rot[t, index[a]] = True
        spec = []
        for d, idx in enumerate(access.indices):
            # Mirrors OpLayout._dim_length: whole dimension, constant index, simple, compound.
            if any(a in local for a in idx.axes):
                spec.append(("whole", access.shape[d]))
            elif not idx.terms:
                spec.append(("const",))
            elif idx.is_simple:
                spec.append(("simple", index[idx.terms[0][0]]))
            else:
                spec.append(("compound", tuple((index[a], abs(c)) for a, c in idx.terms)))
        dims.append(tuple(spec))
    exact = np.zeros(n_a, bool)
    if not padding_safe_reduce(expr):
        for a in expr.reduce_axes:
            exact[index[a]] = True
    free = ~own
    risks = []
    for a in range(n_a):
        ts = np.flatnonzero(rot[:, a])
        for i, t in enumerate(ts):
            for u in ts[i + 1:]:
                shared = free[t] & free[u]
                if shared.any():
                    risks.append((a, int(t), int(u), shared))
    return PlanStructure(
        expr=expr,
        axes=axes,
        extents=np.array([a.extent for a in expr.axes], INT),
        pinned=np.array([a in pinned for a in axes], bool),
        exact=exact,
        own=own,
        rotatable=rot,
        ring_risks=tuple(risks),
        dims=tuple(dims),
        elem_bytes=np.array([dtype_bytes(t.dtype) for t in expr.tensors], INT),
    )


# -- number theory helpers -------------------------------------------------------------------
@lru_cache(maxsize=None)
def divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


@lru_cache(maxsize=None)
def factorize(n: int) -> tuple[tuple[int, int], ...]:
    out, p = [], 2
    while p * p <= n:
        if n % p == 0:
            e = 0
            while n % p == 0:
                n //= p
                e += 1
            out.append((p, e))
        p += 1
    if n > 1:
        out.append((n, 1))
    return tuple(out)


@lru_cache(maxsize=4096)
def factor_tuples(P: int, r: int) -> np.ndarray:
    """All ``r``-tuples of positive integers whose product divides ``P`` (read-only array)."""
    if r == 0:
        out = np.ones((1, 0), INT)
    else:
        rows = []
        for d in divisors(P):
            rest = factor_tuples(P // d, r - 1)
            rows.append(np.concatenate([np.full((len(rest), 1), d, INT), rest], axis=1))
        out = np.concatenate(rows, axis=0)
    out.setflags(write=False)
    return out


def ceil_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return -(-a // b)


def unique_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(X, axis=0, return_inverse=True, return_counts=True)``, fast for int rows.

    numpy sorts rows as opaque records (slow); here each column is ranked on its own and the
    ranks are combined into one integer per row (mixed radix), which sorts fast. Falls back
    to numpy when the radix product would overflow.
    """
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] == 0 or len(X) == 0:
        u, inv, cnt = np.unique(X, axis=0, return_inverse=True, return_counts=True)
        return u, inv.reshape(-1), cnt
    code = np.zeros(len(X), np.int64)
    span = 1
    for j in range(X.shape[1]):
        values, rank = np.unique(X[:, j], return_inverse=True)
        span *= len(values)
        if span >= 2**62:
            u, inv, cnt = np.unique(X, axis=0, return_inverse=True, return_counts=True)
            return u, inv.reshape(-1), cnt
        code = code * len(values) + rank.reshape(-1)
    _, first, inv, cnt = np.unique(code, return_index=True, return_inverse=True, return_counts=True)
    return X[first], inv.reshape(-1), cnt


# -- F_op tuples -----------------------------------------------------------------------------
def axis_values(structure: PlanStructure, max_cores: int) -> list[np.ndarray]:
    """F_op values allowed on each axis (pinned: 1; unpaddable reductions: divisors)."""
    values = []
    for a in range(structure.num_axes):
        e = int(structure.extents[a])
        if structure.pinned[a]:
            values.append(np.ones(1, INT))
        elif structure.exact[a]:
            values.append(np.array([d for d in divisors(e) if d <= max_cores], INT))
        else:
            values.append(np.arange(1, min(e, max_cores) + 1, dtype=INT))
    return values


def op_partitions(structure: PlanStructure, max_cores: int, min_cores: int = 1) -> np.ndarray:
    """Every F_op tuple with ``min_cores <= prod F_op <= max_cores``, shape ``(N, axes)``."""
    rows = np.ones((1, 0), INT)
    prod = np.ones(1, INT)
    for vals in axis_values(structure, max_cores):
        # Each prefix extends with the values that keep the product within max_cores.
        counts = np.searchsorted(vals, max_cores // prod, side="right")
        total = int(counts.sum())
        parent = np.repeat(np.arange(len(rows)), counts)
        starts = np.cumsum(counts) - counts
        pick = np.arange(total) - np.repeat(starts, counts)
        col = vals[pick]
        rows = np.concatenate([rows[parent], col[:, None]], axis=1)
        prod = prod[parent] * col
    if min_cores > 1:
        rows = rows[prod >= min_cores]
    return rows


def sharing_counts(structure: PlanStructure, F: np.ndarray) -> np.ndarray:
    """``P_T`` per row and tensor: product of F_op over the axes the tensor lacks, (N, T)."""
    free = ~structure.own  # (T, A)
    logs = np.where(free[None, :, :], F[:, None, :], 1)
    return np.prod(logs, axis=2)


def padding_ratio(structure: PlanStructure, F: np.ndarray, xp: np.ndarray) -> np.ndarray:
    """Padded over original iteration space, ``prod F*xp / prod extent``, per row."""
    ratio = np.ones(len(F))
    for a in range(structure.num_axes):
        ratio *= (F[:, a] * xp[:, a]) / float(structure.extents[a])
    return ratio


# -- temporal factor assignments -------------------------------------------------------------
@dataclass(frozen=True)
class Assignments:
    """The f_t assignments of one sharing tuple; their steps per axis tabulated on demand."""

    combos: np.ndarray  # (n, T, A)

    @cached_property
    def S(self) -> np.ndarray:
        return self.combos.max(axis=1)

    @cached_property
    def _s_table(self) -> tuple[np.ndarray, np.ndarray]:
        rows, group, _ = unique_rows(self.S)
        return rows, group

    @property
    def s_rows(self) -> np.ndarray:
        """(u, A): the distinct S vectors (padding depends on S only)."""
        return self._s_table[0]

    @property
    def s_group(self) -> np.ndarray:
        """(n,): each assignment's row in :attr:`s_rows`."""
        return self._s_table[1]

    @cached_property
    def _per_axis(self) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        values, index = [], []
        for a in range(self.s_rows.shape[1]):
            v, inv = np.unique(self.s_rows[:, a], return_inverse=True)
            values.append(v)
            index.append(inv.reshape(-1))
        return tuple(values), tuple(index)

    @property
    def s_values(self) -> tuple[np.ndarray, ...]:
        """Per axis: the distinct S values of :attr:`s_rows`."""
        return self._per_axis[0]

    @property
    def s_index(self) -> tuple[np.ndarray, ...]:
        """Per axis: each :attr:`s_rows` entry's position in :attr:`s_values`."""
        return self._per_axis[1]


def temporal_assignments(structure: PlanStructure, P: Sequence[int]) -> np.ndarray:
    """All f_t assignments obeying the divisibility and alignment rules for sharing ``P``.

    Returns ``(n, T, A)``: tensor ``t`` gets factors only on its rotatable axes, with
    ``prod f_t | P_t``, and every axis carries pairwise factor/multiple factors. The first
    row is the unrotated assignment. Memoized per sharing tuple.
    """
    return _assignments(structure, P).combos


def _assignments(structure: PlanStructure, P: Sequence[int]) -> Assignments:
    key = tuple(int(p) for p in P)
    cache = structure._combo_cache
    hit = cache.get(key)
    if hit is not None:
        cache.move_to_end(key)
        return hit
    combos = _join_assignments(structure, key)
    entry = Assignments(combos)
    cache[key] = entry
    held = structure._combo_elements
    held[0] += combos.size
    while held[0] > 10_000_000 and len(cache) > 1:  # ~80 MB of assignments per operator
        _, old = cache.popitem(last=False)
        held[0] -= old.combos.size
    return entry


def _join_assignments(structure: PlanStructure, key: tuple[int, ...]) -> np.ndarray:
    n_t, n_a = structure.num_tensors, structure.num_axes
    combos = np.ones((1, n_t, n_a), INT)
    # Join the tensors with fewest options first: intermediate products stay small.
    order = sorted(range(n_t), key=lambda t: len(factor_tuples(key[t], int(structure.rotatable[t].sum()))))
    done: list[int] = []
    for t in order:
        axes_t = np.flatnonzero(structure.rotatable[t])
        if len(axes_t) and key[t] > 1:
            opts = factor_tuples(key[t], len(axes_t))
            n = len(combos)
            combos = np.repeat(combos, len(opts), axis=0)
            combos[:, t, axes_t] = np.tile(opts, (n, 1))
            ok = np.ones(len(combos), bool)
            for a in axes_t:
                for u in done:
                    if structure.rotatable[u, a]:
                        x, y = combos[:, t, a], combos[:, u, a]
                        ok &= (x % y == 0) | (y % x == 0)
            combos = combos[ok]
        done.append(t)
    combos.setflags(write=False)
    return combos


@dataclass(frozen=True)
class PlanBatch:
    """Candidate plans as arrays: ``F`` (N, A) and ``ft`` (N, T, A), plus derived figures."""

    structure: PlanStructure
    F: np.ndarray
    ft: np.ndarray

    def __len__(self) -> int:
        return len(self.F)

    @cached_property
    def S(self) -> np.ndarray:
        """Steps per axis: the largest temporal factor of any tensor on it."""
        return self.ft.max(axis=1)

    @cached_property
    def xp(self) -> np.ndarray:
        """Padded sub-operator extents ``S * ceil(ceil(E/F) / S)``."""
        S = self.S
        return S * ceil_div(ceil_div(self.structure.extents[None, :], self.F), S)

    @property
    def rp(self) -> np.ndarray:
        return self.xp // self.S

    @property
    def cores(self) -> np.ndarray:
        return np.prod(self.F, axis=1)

    @property
    def steps(self) -> np.ndarray:
        return np.prod(self.S, axis=1)

    def sharing(self) -> np.ndarray:
        return sharing_counts(self.structure, self.F)

    def ring_sizes(self) -> np.ndarray:
        return np.prod(self.ft, axis=2)

    def replicas(self) -> np.ndarray:
        return self.sharing() // self.ring_sizes()

    def partition_bytes(self, xp: np.ndarray | None = None) -> np.ndarray:
        """Bytes of one partition of every tensor, (N, T) (mirrors OpLayout._dim_length)."""
        return partition_bytes(self.structure, self.ft, self.xp if xp is None else xp)

    def memory(self) -> np.ndarray:
        """Bytes per core: one partition of every tensor (OpLayout.memory_bytes_per_core)."""
        return self.partition_bytes().sum(axis=1)

    def padding(self) -> np.ndarray:
        return padding_ratio(self.structure, self.F, self.xp)

    def take(self, rows: np.ndarray) -> "PlanBatch":
        return PlanBatch(self.structure, self.F[rows], self.ft[rows])

    def plan(self, i: int, order: Sequence[int] = ()) -> ExecutionPlan:
        """Row ``i`` as an :class:`ExecutionPlan` (``order``: axis indices, outermost first)."""
        axes = self.structure.axes
        S = self.S[i]
        temporal = tuple(
            {axes[a]: int(self.ft[i, t, a]) for a in range(len(axes)) if self.ft[i, t, a] > 1}
            for t in range(self.structure.num_tensors)
        )
        if len(order):
            loop = tuple(axes[int(a)] for a in order if S[int(a)] > 1)
        else:
            loop = tuple(a for j, a in enumerate(axes) if S[j] > 1)
        return ExecutionPlan({a: int(f) for a, f in zip(axes, self.F[i])}, temporal, loop)


def partition_bytes(structure: PlanStructure, ft: np.ndarray, xp: np.ndarray) -> np.ndarray:
    n = len(xp)
    out = np.empty((n, structure.num_tensors), INT)
    for t, spec in enumerate(structure.dims):
        size = np.ones(n, INT)
        for d in spec:
            if d[0] == "whole":
                size = size * d[1]
            elif d[0] == "simple":
                size = size * (xp[:, d[1]] // ft[:, t, d[1]])
            elif d[0] == "compound":
                length = np.ones(n, INT)
                for a, c in d[1]:
                    length = length + c * (xp[:, a] - 1)
                size = size * length
        out[:, t] = size * structure.elem_bytes[t]
    return out


def memory_lower_bound(structure: PlanStructure, F: np.ndarray) -> np.ndarray:
    """A lower bound of the bytes per core of every plan with these F_op rows."""
    return partition_lower_bounds(structure, F).sum(axis=1)


def partition_lower_bounds(structure: PlanStructure, F: np.ndarray) -> np.ndarray:
    """Per tensor, a lower bound of its partition bytes over every plan of each F_op row, (N, T).

    Each partition is at least its sub-tensor (``xp >= ceil(E/F)`` on every axis) split at
    most ``P_T`` ways along its rotatable dimensions (``prod f_t`` divides ``P_T``), and a
    simple dimension keeps at least one element.
    """
    return _partition_bounds(structure, F)[1]


def subtensor_lower_bounds(structure: PlanStructure, F: np.ndarray) -> np.ndarray:
    """Per tensor, a lower bound of its whole sub-tensor's bytes (its unrotated partition), (N, T)."""
    return _partition_bounds(structure, F)[0]


def _partition_bounds(structure: PlanStructure, F: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = ceil_div(structure.extents[None, :], F)
    P = sharing_counts(structure, F)
    whole = np.zeros((len(F), structure.num_tensors))
    split = np.zeros((len(F), structure.num_tensors))
    for t, spec in enumerate(structure.dims):
        rotating = np.ones(len(F), INT)
        fixed = np.ones(len(F), INT)
        for d in spec:
            if d[0] == "whole":
                fixed = fixed * d[1]
            elif d[0] == "simple":
                if structure.rotatable[t, d[1]]:
                    rotating = rotating * c[:, d[1]]
                else:
                    fixed = fixed * c[:, d[1]]
            elif d[0] == "compound":
                length = np.ones(len(F), INT)
                for a, coef in d[1]:
                    length = length + coef * (c[:, a] - 1)
                fixed = fixed * length
        whole[:, t] = fixed * rotating * structure.elem_bytes[t]
        split[:, t] = fixed * np.maximum(rotating / P[:, t], 1.0) * structure.elem_bytes[t]
    return whole, split


def plans_for(structure: PlanStructure, F: np.ndarray, exclude_unrotated: bool = False,
              max_padding: float = math.inf) -> PlanBatch:
    """Every valid plan (without loop order) of every F_op row: the rows' f_t assignments.

    ``max_padding`` drops plans whose padded iteration space exceeds the original by more
    than that ratio before they are materialized (padding depends on F_op and S only).
    """
    A, T = structure.num_axes, structure.num_tensors
    if len(F) == 0:
        return PlanBatch(structure, F.reshape(0, A), np.ones((0, T, A), INT))
    P = sharing_counts(structure, F)
    keys, inverse, _ = unique_rows(P)
    by_key = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[by_key], np.arange(len(keys) + 1))
    prefilter = math.isfinite(max_padding) or bool(structure.exact.any())
    Fs, fts = [], []
    for k, key in enumerate(keys):
        entry = _assignments(structure, key)
        first = 1 if exclude_unrotated else 0  # row 0 is the unrotated assignment
        rows = by_key[bounds[k]:bounds[k + 1]]
        if len(entry.combos) <= first or not len(rows):
            continue
        if not prefilter:
            combos = entry.combos[first:]
            Fs.append(np.repeat(F[rows], len(combos), axis=0))
            fts.append(np.tile(combos, (len(rows), 1, 1)))
            continue
        ok = _padding_mask(structure, F[rows], entry, max_padding)
        ok[:, :first] = False
        ri, ci = np.nonzero(ok)
        Fs.append(F[rows][ri])
        fts.append(entry.combos[ci])
    if not Fs:
        return plans_for(structure, F[:0])
    batch = PlanBatch(structure, np.concatenate(Fs), np.concatenate(fts))
    return _drop_invalid(batch)


def _padding_mask(structure: PlanStructure, F: np.ndarray, entry: Assignments,
                  max_padding: float) -> np.ndarray:
    """(rows, combos) mask: padding within ``max_padding`` and unpaddable axes unpadded.

    Padding depends on S only: it is computed per distinct S vector (per axis, the padded
    length ``F * S * ceil(ceil(E/F) / S)`` is tabulated for the few distinct S values),
    then spread to the combos.
    """
    n = len(entry.s_rows)
    ratio = np.ones((len(F), n))
    ok = np.ones((len(F), n), bool)
    c = ceil_div(structure.extents[None, :], F)
    for a in range(structure.num_axes):
        values = entry.s_values[a]
        if len(values) == 1 and values[0] == 1 and not structure.exact[a]:
            ratio *= (F[:, a] * c[:, a] / float(structure.extents[a]))[:, None]
            continue
        padded = F[:, a, None] * values[None, :] * ceil_div(c[:, a, None], values[None, :])
        padded = padded[:, entry.s_index[a]]
        ratio *= padded / float(structure.extents[a])
        if structure.exact[a]:
            ok &= padded == structure.extents[a]
    if math.isfinite(max_padding):
        ok &= ratio <= max_padding + 1e-9
    return ok[:, entry.s_group]


def _drop_invalid(batch: PlanBatch) -> PlanBatch:
    """Apply the ring rule, which depends on F_op itself (see the module docstring)."""
    structure = batch.structure
    keep = np.ones(len(batch), bool)
    # (Unpaddable reductions were handled by _padding_mask before materializing.)
    if structure.ring_risks:
        risky = np.zeros(len(batch), bool)
        for a, t, u, shared in structure.ring_risks:
            spread = np.prod(np.where(shared[None, :], batch.F, 1), axis=1) > 1
            risky |= (batch.ft[:, t, a] > 1) & (batch.ft[:, u, a] > 1) & spread
        for i in np.flatnonzero(risky & keep):
            try:
                OpLayout(structure.expr, batch.plan(int(i)))._check_rings()
            except InvalidPlanError:
                keep[i] = False
    return batch if keep.all() else batch.take(np.flatnonzero(keep))


def iter_plan_chunks(structure: PlanStructure, F: np.ndarray, chunk: int = 200_000,
                     exclude_unrotated: bool = False) -> Iterable[PlanBatch]:
    """:func:`plans_for` over ``F`` in pieces of about ``chunk`` plans (bounded memory)."""
    if len(F) == 0:
        return
    keys, inverse, _ = unique_rows(sharing_counts(structure, F))
    per_key = np.array([len(temporal_assignments(structure, k)) for k in keys], INT)
    sizes = per_key[inverse]
    start, acc = 0, 0
    for i in range(len(F)):
        acc += int(sizes[i])
        if acc >= chunk:
            yield plans_for(structure, F[start:i + 1], exclude_unrotated)
            start, acc = i + 1, 0
    if start < len(F):
        yield plans_for(structure, F[start:], exclude_unrotated)


# -- space sizes -----------------------------------------------------------------------------
@dataclass(frozen=True)
class SpaceSizes:
    """Plan-space sizes of one operator (T10 Fig. 17).

    ``complete`` counts every valid (F_op, f_t, loop order) on up to ``max_cores`` cores;
    ``complete_plans`` the same without loop orders. ``filtered`` is the number of (F_op,
    f_t) plans that pass the search constraints (and fit SRAM if asked), ``pareto`` the
    number of time/memory Pareto-optimal plans among them.
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


def count_complete_space(structure: PlanStructure, max_cores: int) -> SpaceSizes:
    """Count the complete plan space on up to ``max_cores`` cores without listing it."""
    F = op_partitions(structure, max_cores)
    if structure.exact.any() or structure.ring_risks:
        # These rules depend on F_op itself: count by listing (such operators are small).
        plans = orders = 0
        for batch in iter_plan_chunks(structure, F):
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
