"""runtime_sim.machine.links: the replica reduction's closed forms, reduce-scatter + gather
(Rabenseifner's reduce) beside the gather tree and the pipelined chain."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.machine.links import (
    REDUCTION_SCHEDULES,
    chunk_latency_seconds,
    fastest_reduction,
    replica_reduction_busy_seconds,
    replica_reduction_schedule,
    replica_reduction_seconds,
    split_pieces,
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
