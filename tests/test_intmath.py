"""Integer helpers of the plan space (tvm_icca.plan_search.intmath) against numpy's own."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_icca.plan_search.intmath import factor_tuples, rank_values, unique_rows


@pytest.mark.parametrize("high", [2, 40, 3000, 10**9])
@pytest.mark.parametrize("low", [0, -7])
def test_unique_rows_is_numpys(low, high) -> None:
    rng = np.random.default_rng(abs(high + low))
    for _ in range(40):
        X = rng.integers(low, high, size=(int(rng.integers(1, 300)), int(rng.integers(1, 8))))
        got = unique_rows(X)
        want = np.unique(X, axis=0, return_inverse=True, return_counts=True)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1].reshape(-1))
        np.testing.assert_array_equal(got[2], want[2])
        values, rank = rank_values(X[:, 0])
        want_values, want_rank = np.unique(X[:, 0], return_inverse=True)
        np.testing.assert_array_equal(values, want_values)
        np.testing.assert_array_equal(rank, want_rank.reshape(-1))


def test_factor_tuples_products_divide() -> None:
    for P in (1, 12, 30, 64):
        for r in (1, 2, 3):
            rows = factor_tuples(P, r)
            assert (P % np.prod(rows, axis=1) == 0).all()
            assert len({tuple(x) for x in rows.tolist()}) == len(rows)
