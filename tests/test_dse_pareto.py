"""tvm_icca.dse.pareto: the front against exhaustive pairwise dominance."""

from __future__ import annotations

import math
import random

import pytest

from tvm_icca.dse.pareto import pareto_front


def _dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])


def _exhaustive(points: list[tuple[float | None, float | None]]) -> list[bool]:
    usable = [p[0] is not None and p[1] is not None and math.isfinite(p[0]) and math.isfinite(p[1])
              for p in points]
    return [usable[i] and not any(usable[j] and _dominates(points[j], points[i])
                                  for j in range(len(points)) if j != i)
            for i in range(len(points))]


@pytest.mark.parametrize("seed", range(40))
def test_matches_pairwise_dominance(seed):
    rng = random.Random(seed)
    n = rng.randint(0, 30)
    # few distinct values: many ties in one coordinate and exact duplicates
    values = [rng.choice([0.5, 1.0, 2.0, 3.0, 1e-9]) for _ in range(6)]
    points: list[tuple[float | None, float | None]] = [
        (rng.choice(values), rng.choice(values)) if rng.random() < 0.5
        else (rng.uniform(0, 1), rng.uniform(0, 1)) for _ in range(n)]
    if n:  # duplicates of points already drawn, and points without a value
        points += rng.sample(points, k=min(3, n))
        points.append((None, 1.0))
        points.append((0.1, math.nan))
    rng.shuffle(points)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    assert pareto_front(xs, ys) == _exhaustive(points)


def test_cases():
    assert pareto_front([], []) == []
    # duplicates are on the front together; a tie in x with a larger y is dominated
    assert pareto_front([1, 1, 1, 2, 0.5], [2, 2, 3, 1, 5]) == [True, True, False, True, True]
    # the same y at a larger x is dominated; a missing value takes no part
    assert pareto_front([1, 2, None, 0.0], [1, 1, 0.0, None]) == [True, False, False, False]
    with pytest.raises(ValueError, match="2 x values but 1"):
        pareto_front([1, 2], [1])
