"""The link byte-hops of the transfers the functional device performs.

The device moves data between cores by indexing arrays: it has no network. What a transfer
costs the interconnect's energy -- the bytes times the links they cross, per hop of their
route on a mesh and once through an all-to-all exchange
(:attr:`~runtime_sim.machine.phase_cost.PhaseCost.byte_hops`, ``link_byte_hops`` of
:mod:`runtime_sim.contract.energy`) -- is a property of the chip's network, so the device asks
the machine model (:mod:`runtime_sim.machine`) for the phases of exactly the transfers it
performed: every shift it made (one unicast phase per shift event), the replica reduction
and split-reduction combine of every operator (the schedule the network picks,
:mod:`runtime_sim.machine.op_transfers`), every re-layout of an input, every load from HBM or
the host, every preload and distribution of a preload stream (:mod:`runtime_sim.machine.preload_delivery`)
and every return to the host. The timing simulator times the same phases, so both executors
count one value.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout, ShiftEvent, cost_key
from runtime_sim.contract.relayout import BlockGrid, input_boxes
from runtime_sim.machine.op_transfers import (
    host_return,
    load_delivery,
    relayout_phase,
    replica_reduction,
    split_combine,
)
from runtime_sim.machine.preload_delivery import distribution_phase, preload_delivery
from runtime_sim.machine.topology import make_topology


class LinkHops:
    """Byte-hops of transfers on ``hw``'s network, each distinct one priced once.

    The prices are kept in the network's memo (:attr:`Topology.phase_memo
    <runtime_sim.machine.topology_base.Topology.phase_memo>`, one per chip: a model repeats
    layers, a shift schedule its events, and every device on the chip runs the same
    programs), under keys of their own."""

    def __init__(self, hw: HardwareSpec) -> None:
        self.hw = hw
        self.topo = make_topology(hw)

    def _cached(self, key: tuple[Any, ...], price: Callable[[], float]) -> float:
        memo = self.topo.phase_memo
        key = ("byte_hops", *key)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = float(price())
        return hit

    def shift(self, layout: OpLayout, event: ShiftEvent) -> float:
        """One shift event of ``layout``: the moving cores receive their partition of tensor
        ``event.tensor`` from ``event.source``, all at once (a unicast phase)."""
        moving = np.flatnonzero(event.moving)
        if moving.size == 0:
            return 0.0
        source = np.asarray(event.source)[moving]
        key = ("shift", cost_key(layout.expr, layout.plan), layout.cores_per_chip, event.tensor,
               moving.tobytes(), source.tobytes())
        P = layout.physical

        def price() -> float:
            nbytes = np.full(moving.size, float(layout.partition_bytes(event.tensor)))
            return self.topo.phase(P[source], P[moving], nbytes).byte_hops

        return self._cached(key, price)

    def reduction(self, layout: OpLayout) -> float:
        """The replica reduction into ring 0 and the combine of split core-local reductions."""
        key = ("reduction", cost_key(layout.expr, layout.plan), layout.cores_per_chip)
        return self._cached(key, lambda: (replica_reduction(layout, self.hw, self.topo)[0]
                                          + split_combine(layout, self.hw, self.topo)[0]).byte_hops)

    def reduction_sent_bytes(self, layout: OpLayout) -> int:
        """Bytes the replica reduction of ``layout`` sends under the schedule the timing
        simulator picks on this network (:func:`runtime_sim.machine.op_transfers.replica_reduction`:
        ``(R - 1)`` partitions per output partition for a tree or a chain, a reduce-scatter's
        pieces and gathered sums for Rabenseifner's)."""
        key = ("reduction_sent", cost_key(layout.expr, layout.plan), layout.cores_per_chip)
        return int(self._cached(key, lambda: replica_reduction(layout, self.hw, self.topo)[3]))

    def relayout(self, grid: BlockGrid, layout: OpLayout, t: int, origin: tuple[Any, ...]) -> float:
        """Input ``t`` of ``layout`` re-laid out from ``grid``, where it waited; ``origin``
        names what the grid depends on (one price per origin, operator and input)."""
        key = ("relayout", origin, cost_key(layout.expr, layout.plan), layout.cores_per_chip, t)
        return self._cached(key, lambda: relayout_phase(self.topo, grid, layout, t,
                                                        input_boxes(layout, t))[0].byte_hops)

    def load(self, kind: str, layout: OpLayout, inputs: Sequence[int]) -> float:
        """Inputs ``inputs`` of ``layout`` loaded from ``kind`` (``"hbm"`` or ``"host"``)."""
        # how a mesh slices an HBM load over its controllers depends on their bandwidth,
        # which the network's memo does not key
        key = ("load", kind, cost_key(layout.expr, layout.plan), layout.cores_per_chip,
               tuple(inputs), self.hw.hbm_bandwidth, self.hw.host_bandwidth)
        return self._cached(key, lambda: load_delivery(
            self.topo, kind, layout, [input_boxes(layout, t) for t in inputs])[0].byte_hops)

    def preload(self, kind: str, layout: OpLayout, inputs: Sequence[int],
                chunks: Sequence[int]) -> float:
        """A preload of ``inputs`` from ``kind`` in their preload state (Elk §4.5)."""
        key = ("preload", kind, cost_key(layout.expr, layout.plan), layout.cores_per_chip,
               tuple(inputs), tuple(chunks), self.hw.hbm_bandwidth, self.hw.host_bandwidth)
        return self._cached(key, lambda: preload_delivery(
            self.topo, kind, layout, tuple(inputs), tuple(chunks),
            [input_boxes(layout, t) for t in inputs]).network.byte_hops)

    def distribution(self, layout: OpLayout, chunked: tuple[tuple[int, int], ...]) -> float:
        """The distribution of preloaded chunks to the replicas that hold them (Elk §4.2)."""
        return distribution_phase(self.topo, layout, chunked)[0].byte_hops

    def host_return(self, layout: OpLayout) -> float:
        """``layout``'s output sent back to the host by the cores that own it."""
        key = ("return", cost_key(layout.expr, layout.plan), layout.cores_per_chip)
        return self._cached(key, lambda: host_return(self.topo, layout)[0].byte_hops)
