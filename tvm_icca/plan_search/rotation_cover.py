"""The least bytes a plan's rotating tensors bring to every core, bounded in polynomial time.

T10's rotation (§4.2, §4.3.1) trades memory for shifts: a tensor that rotates holds one
partition on each core instead of its whole sub-tensor, and every core then receives that
whole sub-tensor, partition by partition, over the loop. A plan of an ``F_op`` row that fits
``budget`` bytes per core by rotating must therefore rotate a set ``S`` of tensors with

    minimize    sum_{t in S} whole_t
    subject to  sum_{t in S} (whole_t - split_t) >= sum_t whole_t - budget,  S non-empty,
                every t in S may rotate in the row,

where ``whole_t`` bounds tensor ``t``'s sub-tensor bytes from below and ``split_t`` its
partition bytes (:mod:`.bounds`). This is a min-cost covering knapsack, NP-hard in general;
the branch-and-bound search (:mod:`.search`) only needs a lower bound of it, so
:func:`least_rotation_bytes` solves it exactly when that is cheap and relaxes it otherwise:

* a row that fits its budget without rotating (``need <= 0``; always with an unbounded
  budget) needs only a non-empty set: the cheapest rotatable tensor, exact, in ``O(T)``;
* a batch whose rows can rotate at most :data:`MAX_ENUMERATED_TENSORS` distinct tensors
  enumerates every set of those (exact);
* otherwise the linear relaxation (``0 <= x_t <= 1``), solved greedily by the ratio
  ``whole_t / (whole_t - split_t)`` as a fractional knapsack (Dantzig's bound), in
  ``O(T log T)`` per row. It never exceeds the integer optimum; neither does a set's
  cheapest member, so the larger of the two is kept.

Enumerating every subset of an operator's tensors instead needed ``2^T`` columns per row:
13 GiB for a 25-input concat.

The same covering problem bounds any non-negative price of rotating a tensor in place of
``whole_t`` (``cost``): the search's models price each rotating tensor's shift latencies and
the arrival of inputs another operator produced as well (:func:`.batch_cost.rotation_shift_bound`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_ENUMERATED_TENSORS", "least_rotation_bytes", "rotation_bound_is_exact"]

#: Rotatable tensors up to which every set of them is enumerated: ``2^12 - 1 = 4095`` sets
#: per row, as many as T10's operators with their few tensors ever need, so the searches of
#: those operators keep the exact bound they always had.
MAX_ENUMERATED_TENSORS = 12

#: Sets times rows enumerated at once (bounds the arrays to a few tens of megabytes).
_CHUNK_CELLS = 1 << 20

#: Relative slack of the relaxation's saving: an enumeration sums float64 bytes and may
#: accept a set whose saving falls short of the need by rounding (a relative error near
#: ``T * 2^-53``); the relaxation asks for ``1e-9`` of the bytes less, so it never rejects
#: a set the enumeration would accept, and its own rounding (far below that slack, since
#: its cost grows at least as fast as the saving) cannot lift it above the optimum.
RELAXATION_SLACK = 1e-9


def least_rotation_bytes(whole: np.ndarray, split: np.ndarray, can: np.ndarray,
                         budget: float, cost: np.ndarray | None = None) -> np.ndarray:
    """Per row, a lower bound of ``sum_{t in S} cost_t`` over the non-empty sets ``S`` of
    tensors that may rotate (``can``) and bring the footprint ``sum whole - sum_{t in S}
    (whole_t - split_t)`` within ``budget``; ``inf`` where no set does (module doc).

    ``whole``, ``split`` (bytes, ``0 <= split <= whole``), ``can`` and ``cost`` are
    ``(N, T)``; ``cost`` (non-negative) defaults to ``whole``, the bytes the rotating tensors
    bring to every core. Exact where :func:`rotation_bound_is_exact` says so, the linear
    relaxation elsewhere.
    """
    whole = np.asarray(whole, float)
    split = np.asarray(split, float)
    can = np.asarray(can, bool)
    cost = whole if cost is None else np.broadcast_to(np.asarray(cost, float), whole.shape)
    if (cost < 0).any():
        # the relaxation's greedy order (and the cheapest member) bound only non-negative prices
        raise ValueError("least_rotation_bytes: cost must not be negative")
    total = whole.sum(axis=1)
    # any non-empty set costs at least its cheapest member; with nothing to save that is exact
    out = np.where(can, cost, np.inf).min(axis=1)
    rows = np.flatnonzero((total > budget) & can.any(axis=1))
    if not len(rows):
        return out
    cand = np.flatnonzero(can[rows].any(axis=0))
    if len(cand) <= MAX_ENUMERATED_TENSORS:
        out[rows] = _enumerated(whole[rows][:, cand], split[rows][:, cand], can[rows][:, cand],
                                total[rows], budget, cost[rows][:, cand])
    else:
        out[rows] = np.maximum(out[rows], _relaxed(whole[rows], split[rows], can[rows],
                                                   total[rows], budget, cost[rows]))
    return out


def rotation_bound_is_exact(can: np.ndarray, whole: np.ndarray, budget: float) -> np.ndarray:
    """Per row, whether :func:`least_rotation_bytes` of these rows is the exact minimum
    (else it is the relaxation's bound, never above it)."""
    can = np.asarray(can, bool)
    need = np.asarray(whole, float).sum(axis=1) > budget
    rows = need & can.any(axis=1)
    if int(can[rows].any(axis=0).sum()) <= MAX_ENUMERATED_TENSORS:
        return np.ones(len(can), bool)
    return ~rows


def _enumerated(whole: np.ndarray, split: np.ndarray, can: np.ndarray, total: np.ndarray,
                budget: float, cost: np.ndarray) -> np.ndarray:
    """The exact minimum over every non-empty set of the ``T <= MAX_ENUMERATED_TENSORS``
    columns, in chunks of rows."""
    T = whole.shape[1]
    member = ((np.arange(1, 1 << T)[None, :] >> np.arange(T)[:, None]) & 1).astype(float)
    barred = (~can).astype(float) @ member > 0  # a set with a tensor that cannot rotate
    out = np.empty(len(whole))
    step = max(1, _CHUNK_CELLS // member.shape[1])
    for lo in range(0, len(whole), step):
        hi = lo + step
        memory = total[lo:hi, None] + (split[lo:hi] - whole[lo:hi]) @ member
        price = cost[lo:hi] @ member
        price = np.where(~barred[lo:hi] & (memory <= budget), price, np.inf)
        out[lo:hi] = price.min(axis=1)
    return out


def _relaxed(whole: np.ndarray, split: np.ndarray, can: np.ndarray, total: np.ndarray,
             budget: float, cost: np.ndarray) -> np.ndarray:
    """Dantzig's bound of the covering knapsack: the fractional optimum, tensors taken by
    increasing cost per byte saved, the last one in part."""
    saves = np.where(can, whole - split, 0.0)
    need = (total - budget) - RELAXATION_SLACK * total
    useful = saves > 0
    ratio = np.where(useful, cost / np.where(useful, saves, 1.0), np.inf)
    order = np.argsort(ratio, axis=1, kind="stable")
    d = np.take_along_axis(saves, order, axis=1)
    w = np.take_along_axis(np.where(useful, cost, 0.0), order, axis=1)
    zero = np.zeros((len(d), 1))
    cum_d = np.cumsum(np.concatenate([zero, d], axis=1), axis=1)  # (N, T + 1), exclusive first
    cum_w = np.cumsum(np.concatenate([zero, w], axis=1), axis=1)
    feasible = cum_d[:, -1] >= need
    # the tensor taken in part: the first whose prefix covers the need
    k = np.minimum((cum_d[:, 1:] < need[:, None]).sum(axis=1), d.shape[1] - 1)
    at = np.arange(len(d))
    part = np.clip((need - cum_d[at, k]) / np.where(d[at, k] > 0, d[at, k], 1.0), 0.0, 1.0)
    return np.where(feasible, cum_w[at, k] + part * w[at, k], np.inf)
