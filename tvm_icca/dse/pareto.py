"""Pareto fronts of a design-space exploration: the designs no other design beats on both counts.

Two objectives, both to be minimised (time per token and energy per token, or time per token
and a cost proxy such as the system's SRAM). A point *dominates* another when it is no worse
in both and better in at least one; the front is the set of points no point dominates
(Deb, "Multi-Objective Optimization using Evolutionary Algorithms", 2001, §2.4). Two equal
points do not dominate each other, so duplicates on the front are all on it.

:func:`pareto_front` finds it with one sort and one sweep (Kung, Luccio and Preparata, "On
finding the maxima of a set of vectors", J. ACM 1975: the two-dimensional case) instead of
comparing every pair.
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["pareto_front"]


def _usable(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def pareto_front(xs: Sequence[float | None], ys: Sequence[float | None]) -> list[bool]:
    """Which points are Pareto-optimal when both coordinates are minimised.

    Parameters
    ----------
    xs, ys : sequence of float or None
        The two objectives of each point (same length). A point with a missing (None) or
        non-finite value takes no part: it is not on the front and dominates nothing.

    Returns
    -------
    list of bool
        ``True`` for the points no other point dominates (no worse in both objectives and
        better in one); equal points are on the front together or not at all.

    Raises
    ------
    ValueError
        ``xs`` and ``ys`` differ in length.
    """
    if len(xs) != len(ys):
        raise ValueError(f"pareto_front: {len(xs)} x values but {len(ys)} y values")
    order = sorted((i for i in range(len(xs)) if _usable(xs[i]) and _usable(ys[i])),
                   key=lambda i: (xs[i], ys[i]))
    front = [False] * len(xs)
    best_y = math.inf  # the least y of the points with a smaller or equal x seen so far
    last: tuple[float, float] | None = None  # the last point put on the front
    for i in order:
        point = (float(xs[i]), float(ys[i]))  # type: ignore[arg-type]
        # in (x, y) order every earlier point has x <= this x: it dominates this one unless
        # this y is strictly smaller than all theirs, or this point equals the last on the front
        if point[1] < best_y or point == last:
            front[i] = True
            last = point
            best_y = min(best_y, point[1])
    return front
