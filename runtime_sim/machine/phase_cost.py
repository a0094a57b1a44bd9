"""What one phase of concurrent transfers costs, and the multicast patterns a phase may carry.

A *phase* is a set of transfers that start together (one shift of a compute-shift step, one
round of a replica reduction, a re-layout, the delivery of an HBM load); every network
(:mod:`runtime_sim.machine.topology`) prices one as a :class:`PhaseCost`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from runtime_sim.contract.relayout import Relayout


@dataclass(frozen=True)
class PhaseCost:
    """Time and traffic of one phase of concurrent transfers."""

    time_s: float
    uncontended_s: float
    intra_bytes: float  # bytes delivered over on-chip links (one count per destination copy)
    inter_bytes: float  # bytes that crossed between chips
    intra_busy_s: float  # load of the busiest on-chip port/link divided by its bandwidth
    inter_busy_s: float  # inter-chip bytes divided by the inter-chip cap
    max_hops: int = 0
    #: The cut that bounds the phase (its busiest resource): ``"links"`` (a mesh link),
    #: ``"controller ports"`` (a link out of an HBM controller's node inside the grid),
    #: ``"edge ports"`` (an edge port of the mesh), ``"injection"`` (a controller's injection
    #: cap), ``"ports"`` (a core's port to the all-to-all exchange), ``"inter-chip"``; "" when
    #: nothing moved.
    bound_by: str = ""
    #: Bytes that crossed the middle cuts of the chips' meshes, by direction: left -> right,
    #: right -> left (the cut between columns ``cols // 2 - 1`` and ``cols // 2``, wrap
    #: links included), top -> bottom, bottom -> top (between rows ``rows // 2 - 1`` and
    #: ``rows // 2``), summed over chips, under the mesh's XY routing; zeros on the
    #: all-to-all exchange. The bisection floor of a run divides them by the cut's links
    #: (:mod:`runtime_sim.timing.floors`).
    cut_bytes: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    #: Bytes times the links each crossed (the sum of every link's bytes): per hop of its
    #: route on a mesh (a byte crossing four routers counts four times), one per byte
    #: delivered through the all-to-all exchange. What the interconnect's energy is priced on
    #: (:mod:`runtime_sim.contract.energy`, ``link_byte_hops``).
    byte_hops: float = 0.0

    @property
    def stall_s(self) -> float:
        """Time lost to contention beyond the uncontended time."""
        return max(0.0, self.time_s - self.uncontended_s)

    @property
    def busy_s(self) -> float:
        """How long the phase holds link bandwidth: its busiest port's or the inter-chip
        fabric's bytes over their bandwidth. Hop latency is not in it: a chunk in flight
        delays its own transfer but leaves the link's bandwidth to other traffic."""
        return max(self.intra_busy_s, self.inter_busy_s)

    def scaled(self, count: float) -> "PhaseCost":
        """The cost of ``count`` repetitions of this phase, one after another."""
        return PhaseCost(self.time_s * count, self.uncontended_s * count, self.intra_bytes * count,
                         self.inter_bytes * count, self.intra_busy_s * count,
                         self.inter_busy_s * count, self.max_hops, self.bound_by,
                         tuple(v * count for v in self.cut_bytes), self.byte_hops * count)

    def __add__(self, other: "PhaseCost") -> "PhaseCost":
        return PhaseCost(self.time_s + other.time_s, self.uncontended_s + other.uncontended_s,
                         self.intra_bytes + other.intra_bytes, self.inter_bytes + other.inter_bytes,
                         self.intra_busy_s + other.intra_busy_s,
                         self.inter_busy_s + other.inter_busy_s, max(self.max_hops, other.max_hops),
                         self.bound_by if self.busy_s >= other.busy_s else other.bound_by,
                         tuple(a + b for a, b in zip(self.cut_bytes, other.cut_bytes)),
                         self.byte_hops + other.byte_hops)


NO_PHASE = PhaseCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)

#: Explicit flows of a pattern: ``(src, dst, nbytes, sample_weight)``.
FlowList = tuple[np.ndarray, np.ndarray, np.ndarray, float]


@dataclass(frozen=True)
class MulticastPattern:
    """Pieces of data, each sent by one core to many receivers (a re-layout onto replicas).

    ``piece_receivers[p, k]`` counts the receivers of piece ``p`` on chip ``k`` (its source
    excluded); ``recv_bytes[c]`` is what core ``c`` receives in all. ``sample_weight`` scales
    the pieces when they stand for a sample. ``flows`` lists the explicit per-destination
    transfers, for networks without multicast.
    """

    piece_src: np.ndarray
    piece_bytes: np.ndarray
    piece_receivers: np.ndarray
    recv_bytes: np.ndarray
    flows: Callable[[], FlowList]
    sample_weight: float = 1.0


def relayout_pattern(rl: Relayout, on_sample: Callable[[], None] | None = None) -> MulticastPattern:
    """The :class:`MulticastPattern` of a re-layout (:func:`runtime_sim.contract.relayout.relayout`): its
    distinct pieces, and its explicit flows on demand (``on_sample`` is called when those are
    a stride sample). The timing simulator and the compiler's Elk tables cost re-layouts
    through it, with :meth:`Topology.multicast_phase`."""

    def flows() -> tuple:  # FlowList and the multicast numbering
        f = rl.flows()
        if on_sample is not None and f.sample_weight > 1:
            on_sample()
        return f.src, f.dst, f.nbytes, f.sample_weight, f.multicast

    return MulticastPattern(rl.piece_src, rl.piece_bytes, rl.piece_receivers, rl.recv_bytes,
                            flows, rl.box_weight)


def bound_by(cuts: list[tuple[str, float]], intra_s: float, inter_s: float) -> str:
    """The cut that bounds a phase: the inter-chip fabric when it is the slowest resource,
    else the first on-chip resource with the largest load ("" when nothing moved)."""
    if inter_s > intra_s:
        return "inter-chip"
    if intra_s <= 0 or not cuts:
        return ""
    top = max(v for _, v in cuts)
    return next(name for name, v in cuts if v == top)
