"""benchmarks/elk_artifact_accounting.py: the Elk artifact's Fig. 18a accounting, by hand."""

from __future__ import annotations

import pathlib
import sys
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import elk_artifact_accounting as acct  # noqa: E402


def _op(start, end, busy, load=(0.0, 0.0), hbm_bytes=0.0):
    return SimpleNamespace(start_s=start, end_s=end, compute_s=busy, transfer_s=0.0,
                           load_start_s=load[0], load_end_s=load[1], hbm_bytes=hbm_bytes)


def test_interval_weighting_multiplies_the_hbm_and_compute_shares():
    # A executes [0, 10] computing 5 of it (share 0.5); B loads during [0, 10], 4 s of it at
    # HBM (share 0.4), then executes [10, 20] computing all of it.
    ops = [_op(0, 10, 5), _op(10, 20, 10, load=(0, 10), hbm_bytes=4e9)]
    parts = acct.interval_breakdown(ops, hbm_bandwidth=1e9, total_s=20.0)
    assert parts["overlap"] == pytest.approx(0.4 * 0.5 * 10)             # 2
    assert parts["preload"] == pytest.approx((0.4 - 0.2) * 10)           # 2
    assert parts["execute"] == pytest.approx((0.5 - 0.2) * 10 + 10)      # 13
    assert parts["interconnect"] == pytest.approx(20 - 2 - 2 - 13)       # 3
    assert sum(parts.values()) == pytest.approx(20.0)


def test_shares_of_overlapping_loads_add_up_to_one_at_most():
    ops = [_op(0, 10, 10), _op(10, 11, 1, load=(0, 10), hbm_bytes=8e9),
           _op(11, 12, 1, load=(0, 10), hbm_bytes=8e9)]
    parts = acct.interval_breakdown(ops, hbm_bandwidth=1e9, total_s=12.0)
    assert parts["overlap"] == pytest.approx(10.0)  # 0.8 + 0.8 capped at 1, times compute 1
    assert parts["preload"] == pytest.approx(0.0)


def test_figure_adjustments_by_hand():
    parts = {"preload": 1e-6, "execute": 4e-6, "overlap": 2e-6, "interconnect": 1e-6}
    clk = 1.325e9
    basic = acct.figure_adjustments(parts, "basic")
    moved = (1e-6 * clk) ** 0.9 / clk
    assert basic["overlap"] == pytest.approx(2e-6 + moved)
    assert basic["execute"] == pytest.approx(4e-6 - moved - 1.8e-6)
    assert basic["interconnect"] == pytest.approx(2.8e-6)
    static = acct.figure_adjustments(parts, "static")
    assert static["overlap"] == pytest.approx(2e-6 - 1.8e-6)
    assert acct.figure_adjustments(parts, "elk-full") == pytest.approx(parts)


def test_ratio_of_sums_over_models():
    rows = [{"design": "static", "x": 3.0}, {"design": "basic", "x": 1.0},
            {"design": "static", "x": 1.0}, {"design": "basic", "x": 1.0},
            {"design": "elk-full", "x": 9.0}]
    assert acct.ratio_of_sums(rows, "x", "static", "basic") == pytest.approx(2.0)
    assert acct.ratio_of_sums(rows, "x", "static", "ideal") is None
    assert acct.ratio_of_sums([{"design": "basic", "x": 0.0}, {"design": "static", "x": 1.0}],
                              "x", "static", "basic") is None
