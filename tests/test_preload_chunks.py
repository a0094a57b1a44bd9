"""Preload states and distribution (runtime_sim.contract.preload_chunks, Elk §4.3/§4.5), checked on labels:
after distribution every core must hold exactly its execute-state partition."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from runtime_sim.contract.errors import InvalidPlanError
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.preload_chunks import (
    chunk_options,
    chunk_range,
    delivery_groups,
    distribution,
    held_chunk,
    preload_bytes,
    replica_ranks,
)
from tvm_icca.testing.exprs import matmul


def _layout(F: dict, temporal=None) -> OpLayout:
    expr = matmul(12, 8, 6)
    return OpLayout(expr, ExecutionPlan(F, temporal or [{}, {}, {}], []))


def test_replica_groups_have_replicas_members() -> None:
    layout = _layout({"m": 3, "n": 2, "k": 1})
    for t in range(2):
        ids, rank = replica_ranks(layout, t)
        S = layout.replicas(t)
        counts = np.bincount(ids)
        assert (counts == S).all()
        for g in range(counts.size):
            assert sorted(rank[ids == g]) == list(range(S))
        # replicas hold equal partitions
        key = layout.partition_key(t)
        assert all(len(set(key[ids == g])) == 1 for g in range(counts.size))


@pytest.mark.parametrize("F", [{"m": 3, "n": 3, "k": 1}, {"m": 2, "n": 6, "k": 1}, {"m": 6, "n": 2, "k": 2}])
def test_distribution_completes_every_partition(F) -> None:
    layout = _layout(F)
    for t in range(2):
        S = layout.replicas(t)
        assert chunk_options(layout, t) == [s for s in range(1, S + 1) if S % s == 0]
        n = int(np.prod(layout.partition_shape(t)))
        for s in chunk_options(layout, t):
            mine = held_chunk(layout, t, s)
            have = [{int(mine[c])} for c in range(layout.num_cores)]
            d = distribution(layout, t, s)
            key = layout.partition_key(t)
            for dst, src, k in zip(d.dst, d.src, d.chunk):
                assert key[dst] == key[src] and mine[src] == k  # from a replica that holds it
                have[dst].add(int(k))
            assert all(h == set(range(s)) for h in have)
            lo, hi = chunk_range(layout, t, s, np.arange(s))
            assert lo[0] == 0 and hi[-1] == n
            itemsize = 4
            assert d.total_bytes == layout.num_cores * n * itemsize - sum(
                int(hi[k] - lo[k]) * itemsize for k in mine)
            assert preload_bytes(layout, t, s) == -(-n // s) * itemsize
            # cores of one delivery group receive the same chunk of the same partition
            groups = delivery_groups(layout, t, s)
            for g in np.unique(groups):
                members = np.flatnonzero(groups == g)
                assert len(set(key[members])) == 1 and len(set(mine[members])) == 1
                assert members.size == S // s


def test_chunk_count_must_divide_replicas() -> None:
    layout = _layout({"m": 3, "n": 6, "k": 1})
    S = layout.replicas(0)
    with pytest.raises(InvalidPlanError, match="must divide"):
        preload_bytes(layout, 0, S + 1)


def test_delivered_plus_distributed_is_every_partition() -> None:
    from runtime_sim.contract.preload_chunks import delivered_bytes

    layout = _layout({"m": 2, "n": 6, "k": 1})
    for t in range(2):
        full = layout.num_cores * layout.partition_bytes(t)
        for s in chunk_options(layout, t):
            assert delivered_bytes(layout, t, s).sum() + distribution(layout, t, s).total_bytes == full


@pytest.mark.parametrize("kind", ["hbm", "host"])
@pytest.mark.parametrize("topology", ["all-to-all", "mesh"])
def test_whole_partition_preload_is_the_plain_load(topology, kind) -> None:
    # with one chunk per partition the preload state is the execute state: its delivery must
    # cost what the simulator's plain load (replica groups from the input boxes) costs
    from runtime_sim.contract.presets import small_chip
    from runtime_sim.machine.preload_delivery import preload_delivery
    from runtime_sim.machine.topology import make_topology
    from runtime_sim.timing.work import WorkBuilder

    hw = small_chip(64, 64 * 1024, topology=topology, hbm_bandwidth=1e12, hbm_controllers=4)
    topo = make_topology(hw)
    layout = OpLayout(matmul(64, 64, 32), ExecutionPlan({"m": 16, "n": 4}, [{}, {}, {}], []),
                      hw.cores_per_chip)
    d = preload_delivery(topo, kind, layout, (0, 1), (1, 1))
    load, need = WorkBuilder(hw, topo).load(kind, "op", layout, (0, 1))
    assert d.network == load.network
    assert d.source_s == load.source_s > 0
    assert (d.unique_bytes, d.delivered_bytes) == (load.unique_bytes, load.delivered_bytes)
    assert d.distinct_bytes == load.distinct_bytes
    assert np.array_equal(d.space, need)
    if kind == "host":  # one chip: its host link sends all of A [64, 64] and B [64, 32] once
        whole = sum(x.nbytes for x in layout.expr.inputs)
        assert d.source_s == pytest.approx(whole / hw.host_bandwidth)


@pytest.mark.parametrize("chips", [1, 2])
def test_distribution_pattern_costs_its_explicit_flows(chips) -> None:
    # the per-block multicast pattern (O(cores)) must cost exactly what its explicit flows cost
    # on the all-to-all exchange: receive ports, one send per chunk, one fabric copy per chip
    from runtime_sim.contract.presets import small_chip
    from runtime_sim.machine.preload_delivery import distribution_pattern
    from runtime_sim.machine.topology import make_topology

    hw = small_chip(64, 64 * 1024, num_chips=chips, inter_chip_bandwidth=2e9)
    topo = make_topology(hw)
    layout = OpLayout(matmul(64, 60, 32), ExecutionPlan({"m": 16, "n": 4}, [{}, {}, {}], []),
                      hw.cores_per_chip)
    for chunked in [((1, 4),), ((0, 2), (1, 8)), ((0, 4), (1, 16))]:
        pattern = distribution_pattern(topo, layout, chunked)
        src, dst, nbytes, _, group = pattern.flows()
        explicit = topo.phase(src, dst, nbytes, multicast=group)
        priced = topo.multicast_phase(pattern)
        for f in dataclasses.fields(explicit):
            got, want = getattr(priced, f.name), getattr(explicit, f.name)
            if isinstance(want, str):  # the cut, a name
                assert got == want, f.name
            else:
                assert got == pytest.approx(want, rel=1e-12), f.name
        assert pattern.recv_bytes.sum() == pytest.approx(nbytes.sum())
