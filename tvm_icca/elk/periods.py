"""Repeated structure in a run's operator sequence: a prefix, ``count`` identical periods, a suffix.

An LLM's run is an embedding, L identical layers and a head; a layer's operators have the same
shapes, dtypes, plans and input sources on the same chip, so their Elk trade-off tables carry
the same key (:attr:`~tvm_icca.elk.tradeoffs.OpTradeoffs.key`). Elk §4.4 applies one layer's
preload order to every identical layer (:mod:`tvm_icca.elk.reorder`), and the Elk pass plans
one period and expands it (:mod:`tvm_icca.elk.period_reuse`); both find the layers here.

:func:`find_repeats` is exact: of every block ``keys[s + l*p + r] == keys[s + r]`` (``l <
count``, ``r < p``, ``count >= 2``) it returns one covering the most items (``count * p``);
ties go to the shortest period, then to the earliest start.

:func:`representatives` applies it again inside one period and around the block: a long
prompt's layer repeats too, as the pieces of its split operators (:mod:`tvm_icca.split` runs a
split chain piece by piece), and the Elk designs' local search treats each group of
identical positions as one class (:func:`tvm_icca.elk.refine.local_search`).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Repeats", "find_repeats", "representatives"]


@dataclass(frozen=True)
class Repeats:
    """Items ``start + l*period + r`` (``l < count``, ``r < period``) form ``count`` identical
    periods; the items before ``start`` are the prefix, those from :attr:`end` the suffix."""

    start: int
    period: int
    count: int

    @property
    def end(self) -> int:
        """One past the last item of the last period (the suffix's first item)."""
        return self.start + self.period * self.count

    def layer_of(self, i: int) -> int | None:
        """Which period item ``i`` belongs to (``None`` in the prefix or the suffix)."""
        if self.start <= i < self.end:
            return (i - self.start) // self.period
        return None


def find_repeats(keys: Sequence[Hashable]) -> Repeats | None:
    """The block of consecutive identical periods covering the most of ``keys`` (ties: the
    shortest period, then the earliest start), or ``None`` when no item sequence repeats.

    Per period ``p`` the items equal to the one ``p`` later form runs; a run of ``r`` such
    items starting at ``s`` is ``r // p + 1`` periods from ``s`` (and no block of period ``p``
    is longer than its run allows), so every period costs one vectorized pass: quadratic in
    the items overall. The answer is kept per key sequence (the Elk designs ask at every
    stage for the same operators)."""
    return _find_repeats(tuple(keys))


@functools.lru_cache(maxsize=8)
def _find_repeats(keys: tuple[Hashable, ...]) -> Repeats | None:
    return _search_repeats(keys)


def _search_repeats(keys: tuple[Hashable, ...]) -> Repeats | None:
    n = len(keys)
    if n < 2:
        return None
    codes: dict[Hashable, int] = {}
    ids = np.array([codes.setdefault(k, len(codes)) for k in keys], dtype=np.int64)
    best: Repeats | None = None
    for period in range(1, n // 2 + 1):
        if best is not None and best.count * best.period == n:
            break   # nothing covers more, and the shortest period came first
        eq = np.concatenate(([False], ids[:-period] == ids[period:], [False]))
        edges = np.flatnonzero(np.diff(eq.astype(np.int8)))
        if edges.size == 0:
            continue
        starts, stops = edges[0::2], edges[1::2]
        counts = (stops - starts) // period + 1
        k = int(np.argmax(counts))     # the first of the most periods: the earliest start
        count = int(counts[k])
        if count >= 2 and (best is None or count * period > best.count * best.period):
            best = Repeats(int(starts[k]), period, count)
    return best


def representatives(keys: Sequence[Hashable]) -> list[int]:
    """Per item, the first item standing at the same position of every nested repeat.

    :func:`find_repeats` of ``keys`` maps each item of a later period to the same position of
    the first period; the prefix, the first period and the suffix are searched the same way
    (a layer whose split operators repeat their pieces, an embedding split in row blocks), so
    items get the same representative exactly when the nested repeats put them at the same
    position. Every item's representative is an item with the same key, no later than it.
    """
    return list(_representatives(tuple(keys)))


@functools.lru_cache(maxsize=8)
def _representatives(keys: tuple[Hashable, ...]) -> tuple[int, ...]:
    rep = list(range(len(keys)))

    def walk(lo: int, hi: int) -> None:
        if hi - lo < 2:
            return
        found = _search_repeats(keys[lo:hi])
        if found is None:
            return
        start, end = lo + found.start, lo + found.end
        walk(lo, start)
        walk(start, start + found.period)   # the repeats inside one period first
        for i in range(start + found.period, end):
            rep[i] = rep[start + (i - start) % found.period]
        walk(end, hi)

    walk(0, len(keys))
    return tuple(rep)
