"""runtime_sim.machine.links: the replica reduction's closed forms, reduce-scatter + gather
(Rabenseifner's reduce) beside the gather tree and the pipelined chain, and the two-level
schedule of replicas spread over chips."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.machine.links import (
    REDUCTION_SCHEDULES,
    chunk_latency_seconds,
    crossing_bandwidth,
    fastest_reduction,
    reduction_schedule_seconds,
    replica_reduction_busy_seconds,
    replica_reduction_schedule,
    replica_reduction_seconds,
    split_pieces,
    two_level_sizes,
)
from tvm_icca.plan_search.batch_cost import replica_reduction_lower_bound

HW = small_chip(16, link_latency_s=1e-7)


def test_split_pieces_cut_whole_elements() -> None:
    assert split_pieces(8, 40, 10) == (8.0, 2.0, 8.0)  # 10 float32 over 8: pieces of 1 or 2
    assert split_pieces(8, 12, 3) == (3.0, 1.0, 4.0)  # fewer elements than replicas
    pieces, elems, nbytes = split_pieces(np.array([2, 46]), np.array([64, 4096]), np.array([32, 2048]))
    assert list(pieces) == [2, 46] and list(elems) == [16, 45] and list(nbytes) == [32, 90]


def test_reduce_scatter_closed_form() -> None:
    """46 replicas of a 4 KiB float16 partition (a decode product's partial sum on an
    IPU-POD4): two rounds of 45 pieces beat six binomial rounds of a whole partition."""
    hw = preset("ipu-pod4-hbm")
    R, p = 46, 4096
    e = p // 2
    s = replica_reduction_schedule(R, p, e, hw)
    q = 45 * 2  # ceil(2048 / 46) = 45 elements
    assert (s.pieces, s.piece_elements, s.piece_bytes) == (46, 45, q)
    sync = hw.sync_cycles / hw.clock_hz
    link = 2 * 45 * q / hw.link_bandwidth + 2 * chunk_latency_seconds(q, hw, 1)
    adds = 45 * 45 / hw.vector_flops_per_cycle / hw.clock_hz + 2 * sync
    schedule, t = fastest_reduction(R, p, e, hw)
    assert REDUCTION_SCHEDULES[int(schedule)] == "scatter"
    assert t == pytest.approx(link + adds, rel=1e-12)
    assert replica_reduction_seconds(R, p, e, hw) == t
    assert replica_reduction_busy_seconds(R, p, e, hw) == pytest.approx(90 * q / hw.link_bandwidth)
    tree = s.tree_fan_in * (p / hw.link_bandwidth) + s.tree_rounds * chunk_latency_seconds(p, hw, 1)
    assert t < tree / 2


def test_one_replica_costs_nothing_and_two_take_a_tree() -> None:
    assert replica_reduction_seconds(1, 4096, 1024, HW) == 0.0
    assert replica_reduction_busy_seconds(1, 4096, 1024, HW) == 0.0
    # two replicas: one transfer of the partition; the reduce-scatter's two rounds lose
    assert REDUCTION_SCHEDULES[int(fastest_reduction(2, 4096, 1024, HW)[0])] == "tree"


def test_lower_bound_holds_for_every_schedule() -> None:
    """The plan search prunes with replica_reduction_lower_bound: it must stay below the
    fastest schedule, reduce-scatter included, for any replicas and partition."""
    for hw in (HW, preset("ipu-pod4-hbm")):
        R = np.repeat(np.array([2, 3, 4, 7, 8, 13, 46, 64, 140, 512], float), 9)
        p = np.tile(np.array([4, 32, 256, 1024, 4096, 8192, 12544, 65536, 1 << 20], float), 10)
        for elem in (2, 4):
            fast = np.asarray(replica_reduction_seconds(R, p, p / elem, hw))
            bound = replica_reduction_lower_bound(R, p, elem, hw)
            assert (bound <= fast * (1 + 1e-12)).all()
            assert (bound > 0).all()


def test_two_level_closed_form() -> None:
    """4 replicas of a 64-byte partial sum, two per chip on two chips: a one-round tree on
    each chip into its leader, then one transfer between the leaders, paying the IPU-Link
    latency and the fabric's rate (slower than the link here)."""
    hw = small_chip(16, num_chips=2, inter_chip_bandwidth=2e9, link_latency_s=1e-7,
                    inter_chip_latency_s=3e-8)
    assert crossing_bandwidth(hw, 1) == 2e9 < hw.link_bandwidth == crossing_bandwidth(hw)
    p, e = 64, 16
    assert two_level_sizes(4, 2) == (2.0, 2.0)
    add = e / hw.vector_flops_per_cycle / hw.clock_hz
    sync = hw.sync_cycles / hw.clock_hz
    on_chip = p / hw.link_bandwidth + 1e-7 + add + sync
    across = p / 2e9 + (1e-7 + 3e-8) + add + sync
    rows = reduction_schedule_seconds(4, p, e, hw, chips=2)
    assert rows.shape == (4,) and REDUCTION_SCHEDULES[3] == "two-level"
    assert rows[3] == pytest.approx(on_chip + across, rel=1e-12)
    # the one-level schedules are costed as on one chip, whatever ``chips``
    assert np.array_equal(rows[:3], reduction_schedule_seconds(4, p, e, hw))
    assert replica_reduction_seconds(4, p, e, hw, chips=2) == min(rows)


def test_one_chip_keeps_the_one_level_schedules() -> None:
    """``chips=1`` (the default) is the three one-level schedules: the same choice, time and
    busy time as without the argument; more chips add the two-level row, never a slower
    choice."""
    hw = preset("ipu-pod4-hbm")
    rng = np.random.default_rng(1)
    R = rng.integers(1, 600, 500).astype(float)
    p = rng.integers(2, 1 << 20, 500).astype(float)
    for f in (fastest_reduction, replica_reduction_busy_seconds):
        assert np.array_equal(np.asarray(f(R, p, p / 2, hw, chips=1)), np.asarray(f(R, p, p / 2, hw)))
    assert reduction_schedule_seconds(R, p, p / 2, hw).shape == (3, 500)
    many = R > 1
    one = np.asarray(replica_reduction_seconds(R, p, p / 2, hw))
    four = np.asarray(replica_reduction_seconds(R, p, p / 2, hw, chips=4))
    assert (four[many] <= one[many]).all() and (four[~many] == 0).all()


def test_lower_bound_holds_for_the_two_level_schedule() -> None:
    """The search's bound stays below the two-level schedule too, on random replicas and
    partitions over two and four chips (its first level sums ceil(R / C) replicas, its
    second C leaders: together at least the partitions and adds one level needs)."""
    rng = np.random.default_rng(2)
    R = rng.integers(2, 700, 3000).astype(float)
    p = np.exp(rng.uniform(np.log(2.0), np.log(4.0 * 2 ** 20), 3000)).round()
    for hw in (small_chip(16, num_chips=2, inter_chip_bandwidth=2e9, link_latency_s=1e-7),
               small_chip(16, num_chips=4, inter_chip_bandwidth=40e9, inter_chip_latency_s=3e-8),
               preset("ipu-pod4-hbm")):
        for elem in (2, 4):
            rows = reduction_schedule_seconds(R, p, p / elem, hw, chips=hw.num_chips)
            bound = replica_reduction_lower_bound(R, p, elem, hw)
            assert (bound[None, :] <= rows * (1 + 1e-12)).all()
