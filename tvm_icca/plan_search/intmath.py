"""Integer helpers of the plan space: divisors, factorizations, factor tuples, fast unique rows."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

#: Integer dtype of every plan-space array.
INT = np.int64


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


#: Largest value (and mixed-radix span) ranked with a presence table instead of a sort: the
#: table costs O(value range), so it is used only when the range is small.
_TABLE_LIMIT = 1 << 20


def rank_values(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` of a 1-D integer array (ascending values).

    Plan-space integers are small and non-negative (factors, counts), so they are ranked
    with a presence table, O(n + range), without sorting; others fall back to numpy.
    """
    x = np.asarray(x).reshape(-1)
    if len(x):
        low, high = int(x.min()), int(x.max())
        if low >= 0 and high < _TABLE_LIMIT and high <= 4 * len(x) + 1024:
            present = np.zeros(high + 1, bool)
            present[x] = True
            values = np.flatnonzero(present).astype(x.dtype, copy=False)
            rank = np.cumsum(present) - 1
            return values, rank[x]
    values, rank = np.unique(x, return_inverse=True)
    return values, rank.reshape(-1)


def unique_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(X, axis=0, return_inverse=True, return_counts=True)``, fast for int rows.

    numpy sorts rows as opaque records (slow); here each column is ranked on its own
    (:func:`rank_values`) and the ranks are combined into one integer per row (mixed radix,
    first column most significant, so codes sort as the rows do). The codes are ranked the
    same way and the distinct rows decoded from them. Falls back to numpy when the radix
    product would overflow.
    """
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] == 0 or len(X) == 0:
        u, inv, cnt = np.unique(X, axis=0, return_inverse=True, return_counts=True)
        return u, inv.reshape(-1), cnt
    code = np.zeros(len(X), np.int64)
    span = 1
    columns = []
    for j in range(X.shape[1]):
        values, rank = rank_values(X[:, j])
        span *= len(values)
        if span >= 2**62:
            u, inv, cnt = np.unique(X, axis=0, return_inverse=True, return_counts=True)
            return u, inv.reshape(-1), cnt
        code = code * len(values) + rank
        columns.append(values)
    codes, inv = rank_values(code)
    cnt = np.bincount(inv, minlength=len(codes))
    unique = np.empty((len(codes), X.shape[1]), X.dtype)
    rest = codes
    for j in range(X.shape[1] - 1, -1, -1):
        base = len(columns[j])
        unique[:, j] = columns[j][rest % base]
        rest = rest // base
    return unique, inv, cnt
