"""The device's stream timing rules (runtime_sim.machine.stream_timing): closed forms and the
contention-free case against the fixed-duration recurrence of the Elk pass."""

from __future__ import annotations

import random

import pytest

from runtime_sim.machine.stream_timing import preload_link_share, stream_times
from tvm_icca.elk.inductive import forward_times


def test_link_share_is_what_the_execute_leaves():
    assert preload_link_share(2.0, 8.0) == pytest.approx(0.75)
    assert preload_link_share(9.0, 8.0) == 0.0  # links busy all along
    assert preload_link_share(0.0, 0.0) == 1.0  # nothing runs


def test_preload_beside_a_busy_execute_closed_form():
    # execute 0 (10 us, links busy half the time) runs while operator 1's preload streams:
    # 4 us of delivery at half rate ends at 8 us (its 1 us source is long done); execute 1
    # waits for execute 0, not for the preload
    t = stream_times(order=[1], horizon=[1, 1], exec_s=[10e-6, 3e-6], exec_busy_s=[5e-6, 0.0],
                     preload_source_s={1: 1e-6}, preload_network_s={1: 4e-6})
    assert t.pre_start == (0.0,) and t.pre_end[0] == pytest.approx(8e-6)
    assert t.exec_start[1] == pytest.approx(10e-6) and t.total_s == pytest.approx(13e-6)
    # a delivery longer than the execute: 5 us at half rate, then full rate after 10 us
    t = stream_times([1], [1, 1], [10e-6, 3e-6], [5e-6, 0.0], {1: 1e-6}, {1: 7e-6})
    assert t.pre_end[0] == pytest.approx(12e-6)
    assert t.exec_start[1] == pytest.approx(12e-6)
    # its own interconnect (Elk's Ideal): no contention, the source bounds it
    t = stream_times([1], [1, 1], [10e-6, 3e-6], [5e-6, 0.0], {1: 6e-6}, {1: 4e-6},
                     separate_interconnect=True)
    assert t.pre_end[0] == pytest.approx(6e-6)


def test_a_fully_busy_execute_holds_the_preload_until_it_ends():
    t = stream_times([1], [1, 1], [10e-6, 1e-6], [10e-6, 0.0], {1: 0.0}, {1: 2e-6})
    assert t.pre_end[0] == pytest.approx(12e-6) and t.total_s == pytest.approx(13e-6)


def test_without_contention_it_is_the_fixed_duration_recurrence():
    rng = random.Random(3)
    for _ in range(50):
        n = rng.randint(1, 12)
        order = [i for i in range(n) if rng.random() < 0.6]
        pos = {j: k for k, j in enumerate(order)}
        # preload k must be issued before its operator executes: horizon[i] > pos[i]
        horizon, h = [], 0
        for i in range(n):
            need = pos[i] + 1 if i in pos else 0
            h = max(h, need, min(len(order), h + rng.randint(0, 2)))
            horizon.append(h)
        exec_s = [rng.uniform(0, 5) for _ in range(n)]
        load = {j: rng.uniform(0, 5) for j in order}
        # no execute traffic: every preload runs at its own pace (source or delivery)
        got = stream_times(order, horizon, exec_s, [0.0] * n, load,
                           {j: rng.uniform(0, load[j]) for j in order})
        want = forward_times(n, order, horizon, exec_s, [load.get(j, 0.0) for j in range(n)])
        assert got.total_s == pytest.approx(want.total_s)
        assert got.exec_start == pytest.approx(want.exec_start)
        assert got.pre_end == pytest.approx(want.pre_end)


def test_contention_never_speeds_a_stream_up():
    rng = random.Random(5)
    for _ in range(50):
        n = rng.randint(2, 10)
        order = list(range(1, n))
        horizon = [min(len(order), i + 1) for i in range(n)]
        exec_s = [rng.uniform(0.1, 5) for _ in range(n)]
        source = {j: rng.uniform(0, 3) for j in order}
        network = {j: rng.uniform(0, 3) for j in order}
        free = stream_times(order, horizon, exec_s, [0.0] * n, source, network)
        busy = stream_times(order, horizon, exec_s, [rng.uniform(0, e) for e in exec_s], source, network)
        assert busy.total_s >= free.total_s - 1e-12
