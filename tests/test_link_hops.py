"""runtime_sim.functional.link_hops: the byte-hops of the transfers the functional device made."""

from __future__ import annotations

import numpy as np

from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.functional.link_hops import LinkHops
from tvm_icca.testing import exprs as builders


def test_shift_pays_every_link_of_its_route():
    """A rotation of A on a 4x4 mesh: each moving core receives its partition from its source
    over the XY route, |dx| + |dy| links; on the all-to-all exchange once per byte."""
    expr = builders.matmul(8, 16, 8)
    layout = OpLayout(expr, ExecutionPlan({"m": 4, "n": 4}, ({"k": 4}, {}, {})))
    counters, advancing = next(iter(layout.counters()))  # after the first step
    event = next(e for e in layout.shifts_after(counters, advancing) if e.tensor == 0)
    moving = np.flatnonzero(event.moving)
    nbytes = layout.partition_bytes(0)
    mesh = LinkHops(small_chip(16, topology="mesh"))
    y, x = mesh.topo.core_y, mesh.topo.core_x
    src, dst = layout.physical[event.source[moving]], layout.physical[moving]
    routes = np.abs(y[src] - y[dst]) + np.abs(x[src] - x[dst])
    assert moving.size > 0 and routes.min() >= 1
    assert mesh.shift(layout, event) == nbytes * routes.sum()
    assert LinkHops(small_chip(16)).shift(layout, event) == nbytes * moving.size


def test_reduction_and_return_follow_the_machine_model():
    """Replicas summed into ring 0 send (R - 1) partitions per output partition: through the
    exchange once each; the host return passes the exchange once per byte returned."""
    expr = builders.matmul(8, 16, 8)
    layout = OpLayout(expr, ExecutionPlan({"m": 2, "n": 2, "k": 4}, ({}, {}, {})))
    hops = LinkHops(small_chip(16))
    assert hops.reduction(layout) == layout.reduction_bytes() == 12 * layout.partition_bytes(2)
    assert hops.host_return(layout) == 4 * layout.partition_bytes(2)
