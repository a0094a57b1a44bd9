"""The plan space of one operator: F_op rows, f_t assignments, candidate batches (T10 §4.2, §4.3.1, §5).

A plan is ``F_op`` (one factor per axis of the tensor expression, compound convolution axes
partitioned per basic axis as T10 §5 does), a temporal factor ``f_t`` per tensor per axis and
a loop order of the axes that take temporal steps. The rotating pace is not a free choice in
our device format: like T10 (§4.2, "T10 designates the rp as the minimum of the sub-tensor
partition lengths") it is derived, ``rp = xp / S`` (:mod:`runtime_sim.contract.layout`).

Validity is :meth:`runtime_sim.contract.layout.OpLayout.validate`, mirrored rule by rule on arrays of
candidates:

* ``1 <= F_a <= extent_a``; pinned axes (sharing a dimension with a core-local axis) keep
  ``F_a = 1`` and never rotate, except a row that its core-local reductions follow
  (``runtime_sim.contract.plan_rules.local_splits``): it takes a divisor of its extent (split statistics);
* a tensor rotates only on axes that index exactly one of its dimensions, with coefficient 1
  and no offset, and never when it is an epilogue input;
* ``prod f_t`` of a tensor divides ``P_T``, the number of cores sharing each sub-tensor;
* on every axis the temporal factors of all tensors are pairwise factor/multiple;
* reduction axes of bodies that zero padding would corrupt are never padded;
* rotation rings must hold each partition once and shift in step
  (:func:`~runtime_sim.contract.layout_checks.check_rings`). That
  check can only fail when two tensors rotating on one axis are both missing an axis with
  ``F > 1`` (otherwise the other tensor's skew is constant along the ring); such candidates
  are checked together on the cores they lay out
  (:func:`~runtime_sim.contract.layout_checks.rings_hold`).

Candidates are built as arrays: every ``F_op`` tuple first, then for every distinct tuple of
sharing counts ``(P_T)`` the ``f_t`` assignments, joined tensor by tensor with the alignment
rule applied after each join. Assignments depend
on ``F_op`` only through ``(P_T)``: they are memoized per sharing tuple in the caller's
:class:`~.search_memo.SearchMemo`. The complete space is counted in :mod:`.space_size`, its
lower bounds are :mod:`.bounds`, T10's search constraints :class:`~.filters.PlanFilters`.

One job at ~650 lines: the validity rules above, vectorized, and the enumeration that applies
them; splitting them apart would put each rule's array form far from its enumeration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterable, Sequence

import numpy as np

from runtime_sim.contract.core_layout import CoreLayout
from runtime_sim.contract.layout_checks import rings_hold
from runtime_sim.contract.plan import ExecutionPlan
from tvm_icca.plan_search.intmath import INT, ceil_div, divisors, factor_tuples, rank_values, unique_rows
from tvm_icca.plan_search.search_memo import SearchMemo, cache_or_new
from tvm_icca.plan_search.structure import PlanStructure


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
    out = np.ones((len(F), structure.num_tensors), INT)
    for t in range(structure.num_tensors):
        for a in np.flatnonzero(~structure.own[t]):
            out[:, t] *= F[:, a]
    return out


def steps_of(ft: np.ndarray) -> np.ndarray:
    """Steps per axis of temporal factors ``ft`` (n, T, A): the largest factor of any tensor
    on each axis, (n, A). (One elementwise maximum per tensor: numpy's reduction over the
    middle axis is several times slower on these few tensors.)"""
    S = ft[:, 0, :].copy()
    for t in range(1, ft.shape[1]):
        np.maximum(S, ft[:, t, :], out=S)
    return S


def padded_extents(structure: PlanStructure, F: np.ndarray, S: np.ndarray) -> np.ndarray:
    """Padded sub-operator extents ``xp = S * ceil(ceil(E/F) / S)`` per row, (N, A): the
    sub-operator rounded up to whole steps (``rp = xp / S``, :mod:`runtime_sim.contract.layout`)."""
    return S * ceil_div(ceil_div(structure.extents[None, :], F), S)


def padding_ratio(structure: PlanStructure, F: np.ndarray, xp: np.ndarray) -> np.ndarray:
    """Padded over original iteration space, ``prod F*xp / prod extent``, per row."""
    ratio = np.ones(len(F))
    for a in range(structure.num_axes):
        ratio *= (F[:, a] * xp[:, a]) / float(structure.extents[a])
    return ratio


# -- temporal factor assignments -------------------------------------------------------------
@dataclass(frozen=True)
class Assignments:
    """The f_t assignments of one sharing tuple, grouped by their steps per axis.

    ``combos`` (n, T, A) are ordered by their steps vector ``S`` (the largest factor of any
    tensor on each axis), stably, so the unrotated assignment (``S = 1`` everywhere, the
    smallest) stays first. The assignments with steps ``s_rows[i]`` are
    ``combos[s_start[i]:s_start[i + 1]]``. Padding depends on ``F_op`` and ``S`` only, so
    :func:`plans_for` decides per (F_op row, S) pair and expands the kept pairs.

    The factors are held as :data:`COMPACT` integers when they fit (they divide sharing
    counts, at most the cores of a chip): the searches' memo then holds four times as many
    lists. Users widen them when they gather plans (:meth:`wide`).
    """

    combos: np.ndarray  # (n, T, A), COMPACT when the factors fit
    s_rows: np.ndarray  # (u, A): the distinct S vectors, ascending
    s_start: np.ndarray  # (u + 1,)

    def wide(self, rows: "np.ndarray | slice" = slice(None)) -> np.ndarray:
        """The assignments ``rows`` as :data:`~.intmath.INT` arrays."""
        return self.combos[rows].astype(INT, copy=False)


#: Integer type the memoized assignments are held in when their factors fit.
COMPACT = np.int16


def _pack_rows(S: np.ndarray) -> np.ndarray | None:
    """One integer per row of non-negative ``S`` that sorts as the rows do (the columns
    that vary, bit-packed, the first most significant), or None when they need more than
    62 bits. Steps are small: a plan's few rotating axes take a few bits each."""
    if not len(S):
        return np.zeros(0, INT)
    high, low = S.max(axis=0), S.min(axis=0)
    code = np.zeros(len(S), INT)
    used = 0
    for a in np.flatnonzero(high > low):
        bits = int(high[a]).bit_length()
        used += bits
        if used > 62:
            return None
        code = (code << bits) | S[:, a]
    return code


def temporal_assignments(structure: PlanStructure, P: Sequence[int],
                         cache: "SearchMemo | None" = None) -> np.ndarray:
    """All f_t assignments obeying the divisibility and alignment rules for sharing ``P``.

    Returns ``(n, T, A)``: tensor ``t`` gets factors only on its rotatable axes, with
    ``prod f_t | P_t``, and every axis carries pairwise factor/multiple factors. The first
    row is the unrotated assignment. Memoized per sharing tuple in ``cache`` if given.
    """
    return assignments(structure, P, cache).wide()


def assignments(structure: PlanStructure, P: Sequence[int],
                cache: "SearchMemo | None" = None,
                caps: Sequence[int] | None = None) -> Assignments:
    """:class:`Assignments` of sharing tuple ``P`` (from ``cache`` when it holds them).

    With ``caps`` (per axis, the largest step count wanted), only the assignments whose
    factors on every axis stay within its cap, in the order of the complete list (a
    subsequence of it, the unrotated assignment still first).
    """
    return assignments_many(structure, [P], [caps], cache)[0]


def assignments_many(structure: PlanStructure, keys: Sequence[Sequence[int]],
                     caps: Sequence[Sequence[int] | None], cache: "SearchMemo | None" = None,
                     ) -> list[Assignments]:
    """:func:`assignments` of several (sharing tuple, caps): those ``cache`` does not hold
    are joined together (:func:`_join_many`), which costs far less than one at a time."""
    memo_keys = [tuple(int(p) for p in key) if c is None else
                 (tuple(int(p) for p in key), tuple(int(x) for x in c)) for key, c in zip(keys, caps)]

    def build(wanted: Sequence[int]) -> list[Assignments]:
        # a capped list is the complete one with the rows over its caps left out, in the
        # same order (_join_group): cut (or, uncapped, group) the complete lists the
        # searches' chunking joined to count them (SearchMemo.joined) rather than joining
        # again
        joined = cache.joined(structure, [memo_keys[i][0] if caps[i] is not None else memo_keys[i]
                                          for i in wanted]) if cache is not None else []
        cut = [(k, whole) for k, whole in zip(wanted, joined) if whole is not None]
        done = {k for k, _ in cut}
        join = [i for i in wanted if i not in done]
        built = dict(zip(join, _join_many(structure, [keys[i] for i in join],
                                          [caps[i] for i in join])))
        if cut:
            kept = [whole if caps[k] is None else
                    whole[(whole <= np.asarray(caps[k], INT)).all(axis=(1, 2))]
                    for k, whole in cut]
            owner = np.repeat(np.arange(len(kept)), [len(c) for c in kept])
            combos = np.concatenate(kept) if kept else np.ones((0, structure.num_tensors,
                                                                 structure.num_axes), INT)
            built.update(zip((k for k, _ in cut), _grouped(combos, owner, len(kept))))
        return [built[i] for i in wanted]

    if cache is None:
        return build(range(len(keys)))
    return cache.assignments_many(structure, memo_keys, build)


def assignment_count(structure: PlanStructure, P: Sequence[int],
                     cache: "SearchMemo | None" = None) -> int:
    """``len(temporal_assignments(structure, P))``, memoized as a number in ``cache`` (the
    chunking of the searches needs the counts of rows whose assignments it may never build)."""
    return assignment_counts(structure, [P], cache)[0]


def assignment_counts(structure: PlanStructure, keys: Sequence[Sequence[int]],
                      cache: "SearchMemo | None" = None) -> list[int]:
    """:func:`assignment_count` of several sharing tuples, the missing ones joined together."""
    tuples = [tuple(int(p) for p in key) for key in keys]

    def count(wanted: Sequence[int]) -> list[int]:
        out: list[int] = []
        start = 0
        for combos, owner, n_k in _join_groups(structure, [tuples[i] for i in wanted],
                                               [None] * len(wanted)):
            cut = np.searchsorted(owner, np.arange(n_k + 1))
            if cache is not None:  # kept for the capped lists (assignments_many)
                cache.keep_joined(structure, [tuples[i] for i in wanted[start:start + n_k]],
                                  [combos[cut[k]:cut[k + 1]].copy() for k in range(n_k)])
            start += n_k
            out.extend(np.diff(cut).tolist())
        return out

    if cache is None:
        return count(range(len(tuples)))
    return cache.assignment_counts(structure, tuples, count)


#: Sharing tuples joined at once by :func:`_join_many` (bounds the intermediate arrays).
JOIN_KEYS = 64


def _join_many(structure: PlanStructure, keys: Sequence[Sequence[int]],
               caps: Sequence[Sequence[int] | None]) -> list[Assignments]:
    """The :class:`Assignments` of every (sharing tuple, caps), joined tensor by tensor
    for all the tuples at once (in groups of :data:`JOIN_KEYS`)."""
    out: list[Assignments] = []
    for combos, owner, n_k in _join_groups(structure, keys, caps):
        out.extend(_grouped(combos, owner, n_k))
    return out


def _join_groups(structure: PlanStructure, keys: Sequence[Sequence[int]],
                 caps: Sequence[Sequence[int] | None]):
    """:func:`_join_group` of ``keys`` (with ``caps``) :data:`JOIN_KEYS` at a time: per group,
    its ``(combos, owner, number of tuples)``."""
    for start in range(0, len(keys), JOIN_KEYS):
        group = np.array(keys[start:start + JOIN_KEYS], INT).reshape(-1, structure.num_tensors)
        yield (*_join_group(structure, group, caps[start:start + JOIN_KEYS]), len(group))


def _join_group(structure: PlanStructure, keys: np.ndarray,
                caps: Sequence[Sequence[int] | None]) -> tuple[np.ndarray, np.ndarray]:
    """Every tuple's assignments ``(n, T, A)`` in join order, and their tuples' indices
    ``owner`` (ascending)."""
    n_k, n_t, n_a = len(keys), structure.num_tensors, structure.num_axes
    # (factors divide the sharing counts: joined in COMPACT integers when those fit)
    dtype = COMPACT if int(keys.max()) <= np.iinfo(COMPACT).max else INT
    combos = np.ones((n_k, n_t, n_a), dtype)
    owner = np.arange(n_k)
    limit = np.array([np.full(n_a, np.iinfo(INT).max) if c is None else c for c in caps], INT)
    # Join the tensors with fewest rotatable axes (fewest options) first: intermediate
    # products stay small. The order depends on the structure only, so a tuple's list is the
    # same whatever it is joined with, and a capped list is a subsequence of the complete one.
    rotating = [t for t in range(n_t) if structure.rotatable[t].any()]
    order = sorted(rotating, key=lambda t: int(structure.rotatable[t].sum()))
    done: list[int] = []
    aligned, rank = _alignment_table(keys)
    for t in order:
        axes_t = np.flatnonzero(structure.rotatable[t])
        # every tuple's options for tensor t, concatenated (tuple k's at offset[k])
        opts = [factor_tuples(int(p), len(axes_t)) for p in keys[:, t]]
        table = np.concatenate(opts)
        of = np.repeat(np.arange(n_k), [len(o) for o in opts])
        keep = (table <= limit[of][:, axes_t]).all(axis=1)
        table, of = table[keep], of[keep]
        counts = np.bincount(of, minlength=n_k)
        offset = np.cumsum(counts) - counts
        # each assignment so far pairs with every option of its own tuple, in order
        per_row = counts[owner]
        rows = np.repeat(np.arange(len(combos)), per_row)
        pick = np.arange(len(rows)) - np.repeat(np.cumsum(per_row) - per_row - offset[owner], per_row)
        # the alignment rule on the factors' ranks (_alignment_table), before the rows it
        # rejects are built
        ok = None
        for j, a in enumerate(axes_t):
            mine = None
            for u in done:
                if structure.rotatable[u, a]:
                    if mine is None:  # each option's row of ``aligned``, as a flat offset
                        mine = (rank[table[:, j]] * len(aligned))[pick]
                    pair = aligned.ravel()[mine + rank[combos[:, u, a]][rows]]
                    ok = pair if ok is None else ok & pair
        if ok is not None and not ok.all():
            rows, pick = rows[ok], pick[ok]
        combos, owner = combos[rows], owner[rows]
        for j, a in enumerate(axes_t):  # (one axis at a time: numpy's fast path)
            combos[:, t, a] = table[:, j][pick]
        done.append(t)
    return combos, owner


def _alignment_table(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The alignment rule (two temporal factors on one axis: one a multiple of the other)
    over every factor the sharing counts ``keys`` allow, as ``(aligned, rank)``: factors
    ``x`` and ``y`` align iff ``aligned[rank[x], rank[y]]``. The factors divide the counts,
    so there are few of them: a lookup replaces two integer divisions per candidate."""
    values = sorted({d for p in np.unique(keys).tolist() for d in divisors(max(int(p), 1))})
    v = np.array(values, INT)
    aligned = (v[:, None] % v[None, :] == 0) | (v[None, :] % v[:, None] == 0)
    rank = np.zeros(int(v[-1]) + 1, INT)
    rank[v] = np.arange(len(v), dtype=INT)
    return aligned, rank


def _grouped(combos: np.ndarray, owner: np.ndarray, n_k: int) -> list[Assignments]:
    """Per tuple (``owner``, ascending), its assignments grouped by steps (stable)."""
    S = steps_of(combos)
    code = _pack_rows(S)
    if code is None:
        _, code, _ = unique_rows(S)
    # stable: within a tuple and steps, the join's order (``owner`` is already ascending)
    bits = int(code.max()).bit_length() if len(code) else 0
    if bits + int(n_k).bit_length() < 63:
        order = np.argsort((owner << bits) | code, kind="stable")
    else:
        order = np.lexsort((code, owner))
    combos, code, S = combos[order], code[order], S[order]
    if combos.dtype != COMPACT and (not len(S) or int(S.max()) <= np.iinfo(COMPACT).max):
        combos = combos.astype(COMPACT)
    cut = np.searchsorted(owner, np.arange(n_k + 1))
    new = np.ones(len(code), bool)
    new[1:] = (code[1:] != code[:-1]) | (owner[1:] != owner[:-1])
    firsts = np.flatnonzero(new)
    at = np.searchsorted(firsts, cut)
    out = []
    for k in range(n_k):
        lo, hi = cut[k], cut[k + 1]
        mine = combos[lo:hi].copy()
        mine.setflags(write=False)
        first = firsts[at[k]:at[k + 1]]
        out.append(Assignments(mine, S[first], np.append(first - lo, hi - lo).astype(INT)))
    return out


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
        return steps_of(self.ft)

    @cached_property
    def xp(self) -> np.ndarray:
        """Padded sub-operator extents (:func:`padded_extents`)."""
        return padded_extents(self.structure, self.F, self.S)

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
        """Bytes per core: one partition of every tensor, and an attention operator's state
        and score block (OpLayout.memory_bytes_per_core)."""
        return self.partition_bytes().sum(axis=1) + self.structure.extra_bytes(self.xp, self.rp)

    def padding(self) -> np.ndarray:
        return padding_ratio(self.structure, self.F, self.xp)

    @classmethod
    def of_plan(cls, structure: PlanStructure, plan: ExecutionPlan) -> "PlanBatch":
        """A one-row batch holding ``plan`` (its loop order: :func:`loop_order_row`)."""
        F = np.array([[plan.op_partition.get(a, 1) for a in structure.axes]], INT)
        ft = np.array([[[plan.ft(t, a) for a in structure.axes]
                        for t in range(structure.num_tensors)]], INT)
        return cls(structure, F, ft)

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


def loop_order_row(structure: PlanStructure, loop_axes: Sequence[str]) -> np.ndarray:
    """Axis indices, outermost first: ``loop_axes`` then the axes that do not step, (A,)."""
    index = {a: i for i, a in enumerate(structure.axes)}
    first = [index[a] for a in loop_axes]
    return np.array(first + [i for i in range(structure.num_axes) if i not in first], INT)


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



def plans_for(structure: PlanStructure, F: np.ndarray, exclude_unrotated: bool = False,
              max_padding: float = math.inf, cache: "SearchMemo | None" = None,
              keep_steps: "StepFilter | None" = None,
              caps: "StepCaps | None" = None) -> PlanBatch:
    """Every valid plan (without loop order) of every F_op row: the rows' f_t assignments.

    ``max_padding`` drops plans whose padded iteration space exceeds the original by more
    than that ratio before they are materialized (padding depends on F_op and S only).
    ``keep_steps`` (a :data:`StepFilter`) drops the plans of the (row, S) pairs it rejects
    before they are materialized too: the searches pass a lower bound of the time of every
    plan with those steps, compared with what they already have. ``caps``: the
    :class:`StepCaps` of a set of rows holding ``F`` (built from ``F`` if not given); a
    search passes the one of all its rows, so each sharing tuple's capped assignments are
    built once.
    """
    A, T = structure.num_axes, structure.num_tensors
    if len(F) == 0:
        return PlanBatch(structure, F.reshape(0, A), np.ones((0, T, A), INT))
    P = sharing_counts(structure, F)
    keys, inverse, _ = unique_rows(P)
    by_key = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[by_key], np.arange(len(keys) + 1))
    prefilter = math.isfinite(max_padding) or bool(structure.exact.any()) or keep_steps is not None
    if prefilter and caps is None:
        caps = StepCaps(structure, F, max_padding)
    first = 1 if exclude_unrotated else 0  # row 0 of the assignments is the unrotated one
    if not prefilter:
        Fs, fts = [], []
        listed = assignments_many(structure, keys, [None] * len(keys), cache)
        for k, entry in enumerate(listed):
            rows = by_key[bounds[k]:bounds[k + 1]]
            combos = entry.wide(slice(first, None))
            if len(rows) and len(combos):
                Fs.append(np.repeat(F[rows], len(combos), axis=0))
                fts.append(np.tile(combos, (len(rows), 1, 1)))
        if not Fs:
            return plans_for(structure, F[:0])
        return _drop_invalid(PlanBatch(structure, np.concatenate(Fs), np.concatenate(fts)), cache)
    wanted = []
    for k, key in enumerate(keys):
        key_caps = caps.of(key)
        if key_caps is not False and bounds[k] < bounds[k + 1]:
            wanted.append((k, key_caps))  # (else no plan of its rows is within the padding bound)
    listed = assignments_many(structure, [keys[k] for k, _ in wanted], [c for _, c in wanted], cache)
    entries, spans = [], []
    for (k, _), entry in zip(wanted, listed):
        if len(entry.combos) > first:
            entries.append(entry)
            spans.append((bounds[k], bounds[k + 1]))
    if not entries:
        return plans_for(structure, F[:0])
    pair_row, pair_s, lo, hi, S = _padded_pairs(structure, F, by_key, spans, entries, first,
                                                max_padding)
    if keep_steps is not None and len(pair_row):
        pF, pS = F[pair_row], S[pair_s]
        keep = keep_steps(pF, pS, padded_extents(structure, pF, pS))
        pair_row, pair_s = pair_row[keep], pair_s[keep]
    count = hi[pair_s] - lo[pair_s]
    total = int(count.sum())
    if not total:
        return plans_for(structure, F[:0])
    # each kept pair expands to its assignments, in pair order: per row, the assignments in
    # their (S-grouped) order, as the complete list has them
    offsets = np.cumsum(count) - count
    local = np.arange(total) - np.repeat(offsets - lo[pair_s], count)
    out_rows = np.repeat(pair_row, count)
    owner = np.repeat(np.searchsorted(np.cumsum([len(e.s_rows) for e in entries]), pair_s,
                                      side="right"), count)
    cut = np.searchsorted(owner, np.arange(len(entries) + 1))
    fts = [entries[e].wide(local[cut[e]:cut[e + 1]]) for e in range(len(entries))
           if cut[e + 1] > cut[e]]
    batch = PlanBatch(structure, F[out_rows], np.concatenate(fts))
    return _drop_invalid(batch, cache)


def _step_pairs(by_key: np.ndarray, spans: Sequence[tuple[int, int]],
                entries: Sequence["Assignments"], first: int):
    """Every (F_op row, S vector) pair of the sharing tuples' rows, tuple by tuple, row by row.

    ``spans``: per tuple, its rows' range in ``by_key``. Returns the pairs' rows and global S
    indices, and per global S index the range of its assignments ``[lo, hi)`` within its
    tuple's list (the unrotated one dropped when ``first`` is 1), and the S vectors.
    """
    n = np.array([b - a for a, b in spans], INT)
    u = np.array([len(e.s_rows) for e in entries], INT)
    m = n * u
    tup = np.repeat(np.arange(len(entries)), m)
    local = np.arange(int(m.sum())) - np.repeat(np.cumsum(m) - m, m)
    row_in, s_in = np.divmod(local, u[tup])
    pair_row = by_key[np.array([a for a, _ in spans], INT)[tup] + row_in]
    pair_s = (np.cumsum(u) - u)[tup] + s_in
    lo = np.concatenate([e.s_start[:-1] for e in entries])
    hi = np.concatenate([e.s_start[1:] for e in entries])
    if first:
        lo = np.maximum(lo, first)  # the unrotated assignment is the first of S = 1
    S = np.concatenate([e.s_rows for e in entries])
    return pair_row, pair_s, lo, hi, S


def _padded_pairs(structure: PlanStructure, F: np.ndarray, by_key: np.ndarray,
                  spans: Sequence[tuple[int, int]], entries: Sequence["Assignments"], first: int,
                  max_padding: float):
    """:func:`_step_pairs`, keeping the pairs with assignments, padding within
    ``max_padding`` and no padding on unpaddable axes.

    The padded length of axis ``a``, ``F * S * ceil(ceil(E/F) / S)``, depends on ``F_a`` and
    ``S_a`` only, and the S vectors of a search take few values per axis: each axis's ratio
    is computed per (row, value) and gathered per pair, on the axes whose steps vary (the
    others are a factor per row).
    """
    pair_row, pair_s, lo, hi, S = _step_pairs(by_key, spans, entries, first)
    some = (hi > lo)[pair_s]
    if not some.all():
        pair_row, pair_s = pair_row[some], pair_s[some]
    E = structure.extents
    c = ceil_div(E[None, :], F)
    row_ratio = np.ones(len(F))
    ratio = np.ones(len(pair_row))
    for a in range(structure.num_axes):
        values, index = rank_values(S[:, a])
        padded = F[:, a, None] * values[None, :] * ceil_div(c[:, a, None], values[None, :])
        r = padded / float(E[a])
        if structure.exact[a]:
            r = np.where(padded == E[a], r, np.inf)
        if len(values) == 1:
            row_ratio *= r[:, 0]
        else:
            ratio *= r.ravel()[pair_row * len(values) + index[pair_s]]
    ratio *= row_ratio[pair_row]
    keep = ratio <= max_padding + PADDING_SLACK if math.isfinite(max_padding) else np.isfinite(ratio)
    return pair_row[keep], pair_s[keep], lo, hi, S


#: ``keep(F, S, xp) -> bool mask``: for F_op rows ``F`` (n, A), steps per axis ``S`` (n, A)
#: and padded extents ``xp`` (n, A), whether plans with them may still be wanted.
StepFilter = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]

#: Slack of the padding comparisons (floating-point ratios of integers).
PADDING_SLACK = 1e-9


class StepCaps:
    """Per sharing tuple of a set of F_op rows, a bound of the steps ``S`` on every axis of
    any of their plans within ``max_padding`` and without padding on unpaddable axes.

    Padding is at least ``F_a * S_a / E_a`` on axis ``a`` and at least the unrotated
    ``F_b * ceil(E_b / F_b) / E_b`` on every other axis, which bounds ``S_a``; an unpaddable
    axis needs ``F_a * ceil(E_a / F_a) = E_a`` and steps dividing ``ceil(E_a / F_a)``. The
    bounds only skip assignments that :func:`_padded_pairs` rejects anyway, so the capped
    assignments give the same plans, far cheaper when the bound is tight (T10's 0.9 padding
    threshold leaves a few step counts per axis).
    """

    def __init__(self, structure: PlanStructure, F: np.ndarray, max_padding: float):
        E = structure.extents
        c = ceil_div(E[None, :], F)
        cap = np.full(F.shape, np.inf)
        if math.isfinite(max_padding) and len(F):
            base = F * c / E[None, :].astype(float)
            # (n, 0) for an expression without axes (a 0-d elementwise op): nothing to cap
            others = np.stack([np.prod(np.delete(base, a, axis=1), axis=1)
                               for a in range(structure.num_axes)], axis=1) \
                if structure.num_axes else np.ones((len(F), 0))
            limit = (max_padding + PADDING_SLACK) * E[None, :] / (F * others)
            cap = np.floor(limit * (1 + PADDING_SLACK))
        for a in np.flatnonzero(structure.exact):
            cap[:, a] = np.where(F[:, a] * c[:, a] == E[a], np.minimum(cap[:, a], c[:, a]), 0)
        keys, inverse, _ = unique_rows(sharing_counts(structure, F)) if len(F) else (
            np.zeros((0, structure.num_tensors), INT), np.zeros(0, INT), None)
        union = np.zeros((len(keys), structure.num_axes))
        np.maximum.at(union, inverse, cap)
        # the largest factor any tensor can take on each axis (1: nothing rotates on it)
        most = np.where(structure.rotatable[None, :, :], keys[:, :, None], 1).max(axis=1,
                                                                                  initial=1)
        capped = np.minimum(union, most).astype(INT)
        none_fit = (union < 1).any(axis=1).tolist()
        uncut = (capped == most).all(axis=1).tolist()
        self._caps: dict[tuple[int, ...], tuple[int, ...] | None | bool] = {
            tuple(key): False if no else None if whole else tuple(c)
            for key, no, whole, c in zip(keys.tolist(), none_fit, uncut, capped.tolist())}

    def of(self, P: Sequence[int]) -> "tuple[int, ...] | None | bool":
        """The caps of sharing tuple ``P``: ``None`` when nothing is cut, ``False`` when no
        plan of its rows qualifies."""
        key = tuple(int(p) for p in P)
        if key not in self._caps:
            raise KeyError(f"sharing tuple {key} is not among the rows of these caps")
        return self._caps[key]


def _drop_invalid(batch: PlanBatch, cache: "SearchMemo | None" = None) -> PlanBatch:
    """Apply the ring rule, which depends on F_op itself (see the module docstring), to the
    batch's rows at risk at once (:func:`~runtime_sim.contract.layout_checks.rings_hold`, the
    batched :func:`~runtime_sim.contract.layout_checks.check_rings`). Its verdicts are kept
    in ``cache`` (:meth:`SearchMemo.ring_verdicts`): they depend only on which tensor each
    axis indexes, F_op and f_t, so other batches and other operators of the same pattern
    reuse them."""
    structure = batch.structure
    keep = np.ones(len(batch), bool)
    # (Unpaddable reductions were handled by _padded_pairs before materializing.)
    if structure.ring_risks:
        risky = np.zeros(len(batch), bool)
        for a, t, u, shared in structure.ring_risks:
            spread = np.prod(np.where(shared[None, :], batch.F, 1), axis=1) > 1
            risky |= (batch.ft[:, t, a] > 1) & (batch.ft[:, u, a] > 1) & spread
        rows = np.flatnonzero(risky)
        if rows.size:
            # An axis every rotating tensor is indexed by cuts the cores into identical copies
            # of one ring structure (it enters no ring position and no Cannon skew): the
            # verdict is the same for any F_op on it, so plans that differ only there are
            # checked once.
            memo = cache_or_new(cache)
            pattern = (structure.own.shape, structure.own.tobytes())
            movers = (batch.ft[rows] > 1).any(axis=2)                     # (r, T)
            common = (~movers[:, :, None] | structure.own[None]).all(axis=1)  # (r, A)
            reduced = np.where(common, 1, batch.F[rows]).astype(INT)
            ft = batch.ft[rows].astype(INT)
            keys = [pattern + (reduced[j].tobytes(), ft[j:j + 1].tobytes())
                    for j in range(len(rows))]
            keep[rows] = memo.ring_verdicts(
                keys,
                lambda todo: rings_hold(CoreLayout(structure.own, reduced[todo], ft[todo])).tolist())
    return batch if keep.all() else batch.take(np.flatnonzero(keep))


def iter_plan_chunks(structure: PlanStructure, F: np.ndarray, chunk: int = 200_000,
                     exclude_unrotated: bool = False,
                     cache: "SearchMemo | None" = None) -> Iterable[PlanBatch]:
    """:func:`plans_for` over ``F`` in pieces of about ``chunk`` plans (bounded memory)."""
    if len(F) == 0:
        return
    cache = cache_or_new(cache)
    keys, inverse, _ = unique_rows(sharing_counts(structure, F))
    per_key = np.array(assignment_counts(structure, keys, cache), INT)
    sizes = per_key[inverse]
    start, acc = 0, 0
    for i in range(len(F)):
        acc += int(sizes[i])
        if acc >= chunk:
            yield plans_for(structure, F[start:i + 1], exclude_unrotated, cache=cache)
            start, acc = i + 1, 0
    if start < len(F):
        yield plans_for(structure, F[start:], exclude_unrotated, cache=cache)
