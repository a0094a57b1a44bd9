"""Box geometry of re-layouts (runtime_sim.contract.relayout): the distinct bytes each chip
needs, against plain loops over the cores."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.contract.relayout import Boxes


def _unique_bytes_by_loops(boxes: Boxes, chip_of_core: np.ndarray, num_chips: int) -> np.ndarray:
    """Per chip, the bytes of its distinct (box) rows among the cores that need any."""
    seen, out = set(), np.zeros(num_chips)
    need = boxes.nbytes
    for c in range(boxes.num_cores):
        row = (int(chip_of_core[c]), *boxes.lo[c].tolist(), *boxes.hi[c].tolist())
        if need[c] > 0 and row not in seen:
            seen.add(row)
            out[row[0]] += float(need[c])
    return out


@pytest.mark.parametrize("seed", range(4))
def test_unique_bytes_per_chip_counts_each_box_once_per_chip(seed) -> None:
    """Replicated boxes count once per chip, distinct ones in full, absent cores not at all;
    as the loop counts them, also for boxes beyond the tensor (numpy's row sort then)."""
    rng = np.random.default_rng(seed)
    shape = (6, 5, 4)
    cores, chips = 48, 3
    grid = [rng.integers(0, s + 1, (8, 2)) for s in shape]  # 8 distinct-ish boxes, replicated
    pick = rng.integers(0, 8, cores)
    lo = np.stack([np.minimum(g[pick, 0], g[pick, 1]) for g in grid], axis=1)
    hi = np.stack([np.maximum(g[pick, 0], g[pick, 1]) for g in grid], axis=1)
    present = rng.random(cores) > 0.2
    chip_of_core = rng.integers(0, chips, cores)
    for boxes in (Boxes(lo, hi, shape, 2), Boxes(lo, hi, shape, 4, present),
                  Boxes(lo - 1, hi + 1, shape, 2)):
        got = boxes.unique_bytes_per_chip(chip_of_core, chips)
        np.testing.assert_array_equal(got, _unique_bytes_by_loops(boxes, chip_of_core, chips))
    one = Boxes(lo, hi, shape, 2).unique_bytes_per_chip(np.zeros(cores, np.int64), 1)
    assert one[0] < float(Boxes(lo, hi, shape, 2).nbytes.sum())  # replicas counted once


def test_unique_bytes_of_a_scalar_and_of_nothing() -> None:
    empty = np.zeros((3, 0), np.int64)
    scalar = Boxes(empty, empty, (), 4)
    np.testing.assert_array_equal(scalar.unique_bytes_per_chip(np.array([0, 1, 1]), 2), [4.0, 4.0])
    none = Boxes(np.zeros((2, 1), np.int64), np.zeros((2, 1), np.int64), (3,), 4)
    np.testing.assert_array_equal(none.unique_bytes_per_chip(np.zeros(2, np.int64), 2), [0.0, 0.0])
