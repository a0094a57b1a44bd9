"""Inter-core networks of the simulated ICCA device: what a set of concurrent transfers costs.

Elk §5 "Simulation framework" models every core, every network link (latency and bandwidth)
and the off-chip HBM; packets that share a link are served one after another (Elk §6.1).
This module does the same at the granularity the timing simulator needs: a *phase* is a set
of transfers (flows) that start together (one shift of a compute-shift step, one round of a
replica reduction, a re-layout, the delivery of an HBM load), and its time is set by the most
loaded resource. Loads are accumulated over all flows at once with numpy (``np.bincount`` over
port and link ids, difference arrays for mesh routes), never flow by flow in Python.

Nodes are numbered ``[0, N)`` for cores, ``[N, N + H)`` for HBM controllers and
``[N + H, N + H + C)`` for the host link of each chip (``N`` cores, ``H`` controllers, ``C``
chips). Core ``c`` lives on chip ``c // (N / C)`` (cores are split into chips by index);
controller ``h`` on chip ``h mod C``.

Cost of one phase (all topologies)::

    time = max(resource bytes / resource bandwidth) + max(flow latency)
    flow latency = ceil(bytes / shift_buffer_bytes) * (hops * link_latency_s
                                                        + chip_hops * inter_chip_latency_s)

Every transfer is staged through the per-core shift buffer (T10 §5: a smaller buffer "will
require multiple shift iterations"), and each staged chunk pays the latency of every hop of
its path; chunks of different flows stream behind each other on a shared resource, so only
the bytes serialize there. A ``shift_buffer_bytes`` of 0 means no staging (one chunk).

*Uncontended* time is what the slowest flow would take alone on the network; ``time -
uncontended`` is the contention stall the timing report accounts for.

Topologies:

* :class:`AllToAllTopology` (IPU, Elk §2.1): every core has one port to the exchange; a core
  that receives from k sources, or sends to k destinations, at once serves them one after
  another at full link bandwidth. Identical data for several receivers (replicas of a
  sub-tensor during a re-layout) is broadcast: sent once, received by each (Elk §5 emulates
  HBM preload with exactly such a broadcast). HBM controllers and host links are dedicated nodes of the
  network (Elk §5: "we model HBM controllers as dedicated nodes"); they multicast, so their
  own rate is charged by the caller on the unique bytes they read (see
  :mod:`runtime_sim.timing`), and here only the receiving ports are charged.
* :class:`MeshTopology` (Elk §5, §6.1): the cores of each chip on a near-square 2D grid
  (row-major); each core drives its up to 4 neighbour links at once (Elk §6.1, "each core can
  simultaneously communicate with all its neighbors (up to 4 in a 2D mesh)"); dimension-order
  (XY) routing (Elk §4.5); contention is the maximum load over directed links.
  *Multicast*: flows that carry the same data (``multicast`` ids; a re-layout's pieces, the
  replicas of an HBM tensor) form one XY tree per destination chip: the packet is replicated
  at the routers on the union of its XY routes, so each link carries it once (on the root
  row up to the extreme destination columns, then down/up each destination column to its
  extreme rows: one link-id range per tree and per (tree, column), summed with the same
  difference arrays as unicast routes). Elk's simulator moves "shared data" by broadcast
  (§2.2, §5); it does not say how a mesh replicates it: XY-tree multicast is our choice.
  *HBM and host*: Elk §5 "attach[es] HBM controllers to the edges of the mesh grid". The mesh
  has ``2 * (rows + cols)`` free edge ports (:func:`edge_ports`, one per boundary side of an
  edge router, two at a corner); each controller is wired to a contiguous span of them (with
  4 controllers per chip, one side each; a host link to all) and injects through all of them
  in parallel, each port at the link bandwidth (Elk §6.1: every network link has the same
  bandwidth). Data for a core enters through the controller's port straight across from it
  (same column on the top/bottom side, same row on the left/right side), else its nearest
  port, and then routes XY (as a tree when several cores need the same bytes). So a
  controller delivers at ``min(its HBM share, E ports x link bandwidth)``, a chip at most
  ``min(hbm_bandwidth per chip, 2 (rows + cols) x link bandwidth)``: the edge cut. Sliced
  evenly over the controllers (Elk §5), the short sides' controllers bind (fewer ports, same
  bytes); :meth:`MeshTopology.hbm_load` slices each load's tensors over the sides so that
  the edge ports share it evenly (our choice: Elk does not say how a mesh chip places
  tensors over its HBM modules). For the
  IPU-POD4 mesh (32 x 46 per chip, 5.5 GB/s links) that cut is 156 x 5.5 GB/s = 0.86 TB/s per
  chip, below the 4 TB/s of its HBM: a property of a mesh with IPU-rate links, not of the
  model (``MeshTopology.io_bandwidth`` widens the ports for experiments).
* Mesh hardware as built (issue 27): the grid of a chip may be given
  (:meth:`HardwareSpec.mesh_grid`: ``mesh_rows`` x ``mesh_cols``, nodes without cores), and
  the HBM controllers may sit *inside* it as NoC nodes (``hbm_placement``, as Tenstorrent's
  DRAM tiles): such a controller's data routes XY from its own node, so its up to 4 links
  are its ports ("controller ports"), and ``hbm_injection_bandwidth`` caps what it pushes
  into the NoC ("injection"). With ``mesh_torus`` every row and column is a ring with a
  wrap link; a route goes the shorter way round each ring (ties forward: east, south) and a
  multicast tree extends both ways from its root as far as its farthest destination each
  way. Every phase names the cut that bounds it (:attr:`PhaseCost.bound_by`).
* Multi-chip (both): traffic between chips shares one capped fabric of
  ``inter_chip_bandwidth`` bytes/s (Elk §5 tracks "in-flight inter-chip transfer events and
  cap[s] their total bandwidth"; 640 GB/s for IPU-POD4). On the mesh, a cross-chip flow first
  crosses the chip dimension (landing at the same grid position in the destination chip),
  then routes X then Y: dimension order with the chip index as the outermost dimension.
  The Elk artifact's alternative, a x1.25 communication factor beyond 1,472 cores, is not
  applied on top of the explicit cap.

One job at ~700 lines: the cost of a phase, on each network. Both topologies share the
phase model (ports, links, multicast patterns, latencies); kept in one module so the two
cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.mesh_grid import mesh_shape
from runtime_sim.contract.relayout import Relayout
from runtime_sim.machine.links import chunk_latency_seconds


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
                         tuple(v * count for v in self.cut_bytes))

    def __add__(self, other: "PhaseCost") -> "PhaseCost":
        return PhaseCost(self.time_s + other.time_s, self.uncontended_s + other.uncontended_s,
                         self.intra_bytes + other.intra_bytes, self.inter_bytes + other.inter_bytes,
                         self.intra_busy_s + other.intra_busy_s,
                         self.inter_busy_s + other.inter_busy_s, max(self.max_hops, other.max_hops),
                         self.bound_by if self.busy_s >= other.busy_s else other.bound_by,
                         tuple(a + b for a, b in zip(self.cut_bytes, other.cut_bytes)))


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


def perimeter(rows: int, cols: int) -> np.ndarray:
    """Local indices of the edge cores of a ``rows x cols`` grid, clockwise from (0, 0)."""
    if rows == 1 or cols == 1:
        return np.arange(rows * cols, dtype=np.int64)
    cells = [(0, x) for x in range(cols)]
    cells += [(y, cols - 1) for y in range(1, rows)]
    cells += [(rows - 1, x) for x in range(cols - 2, -1, -1)]
    cells += [(y, 0) for y in range(rows - 2, 0, -1)]
    return np.array([y * cols + x for y, x in cells], dtype=np.int64)


def edge_ports(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """The free boundary ports of a ``rows x cols`` mesh, clockwise from (0, 0): the links an
    I/O node (HBM controller, host link) can attach to an edge router by (Elk §5: controllers
    "attach[ed] ... to the edges of the mesh grid").

    Returns the local index of each port's router and its side (0 top, 1 right, 2 bottom,
    3 left): ``cols`` ports on the top and bottom, ``rows`` on the left and right, so
    ``2 * (rows + cols)`` in all; a corner router has two (one per side it lies on).
    """
    x, y = np.arange(cols), np.arange(rows)
    router = np.concatenate([x, y * cols + cols - 1, (rows - 1) * cols + x[::-1], y[::-1] * cols])
    side = np.repeat(np.arange(4), [cols, rows, cols, rows])
    return router.astype(np.int64), side.astype(np.int64)


class Topology:
    """A network of cores, HBM controllers and host links (see the module docstring)."""

    kind = "abstract"

    def __init__(self, hw: HardwareSpec):
        self.hw = hw
        self.num_cores = hw.num_cores
        self.num_chips = hw.num_chips
        self.num_controllers = hw.hbm_controllers
        self.cores_per_chip = hw.cores_per_chip
        n, h, c = self.num_cores, self.num_controllers, self.num_chips
        self.num_nodes = n + h + c
        chip = np.empty(self.num_nodes, np.int64)
        chip[:n] = np.arange(n) // self.cores_per_chip
        chip[n:n + h] = np.arange(h) % c
        chip[n + h:] = np.arange(c)
        self.node_chip = chip
        self._home = [self._home_controllers(k) for k in range(c)]
        #: Phases already costed on this network, by what they depend on: re-layouts and
        #: distributions by operator structure, plan and chunk counts, loads by their flows
        #: (:meth:`memo_phase`). A phase is routed over links and ports only, so chips that
        #: differ in their HBM or host bandwidth alone share one memo (:func:`_network_memo`):
        #: the designs of a sweep point, and its points along an HBM-bandwidth axis, cost
        #: each phase once.
        self.phase_memo: dict[tuple, Any] = _network_memo(_network_key(hw))

    def home_controllers(self, chip: int) -> np.ndarray:
        """Controllers (0-based indices) that serve the HBM data of ``chip``'s cores."""
        return self._home[chip]

    # -- nodes ---------------------------------------------------------------------------
    def controller_node(self, h: int) -> int:
        return self.num_cores + h

    def host_node(self, chip: int) -> int:
        return self.num_cores + self.num_controllers + chip

    def controllers_of_chip(self, chip: int) -> np.ndarray:
        """Controller indices (0-based, not node ids) attached to ``chip``."""
        return np.flatnonzero(np.arange(self.num_controllers) % self.num_chips == chip)

    def _home_controllers(self, chip: int) -> np.ndarray:
        # A core's HBM data is sliced over the controllers of its own chip (each chip's HBM
        # holds what its cores need, Elk §5/§6.1 model parallelism); a chip without
        # controllers reads through all of them.
        own = self.controllers_of_chip(chip)
        return own if own.size else np.arange(self.num_controllers)

    def io_flows(self, kind: str, dst: np.ndarray, nbytes: np.ndarray, group: np.ndarray | None = None):
        """Flows that deliver ``nbytes[i]`` to core ``dst[i]`` from HBM or the host.

        HBM data is striped evenly over the home controllers of the destination's chip (Elk §5
        "evenly slice each tensor across all HBM modules"); host data comes over the
        destination chip's own host link. With ``group`` (destinations with equal ids need the
        same bytes, e.g. replicas of a sub-tensor), a fourth array numbers the data of every
        flow for :meth:`phase`'s ``multicast``: equal ``group`` and equal source.
        """
        dst = np.asarray(dst, np.int64)
        nbytes = np.asarray(nbytes, np.float64)
        gid = np.arange(dst.size) if group is None else np.asarray(group, np.int64)
        chip = self.node_chip[dst]
        if kind == "host":
            flows = (self.num_cores + self.num_controllers + chip, dst, nbytes)
            return flows if group is None else flows + (gid,)
        if kind != "hbm":
            raise ValueError(f"unknown I/O kind {kind!r}")
        if self.num_controllers == 0:
            raise ValueError(f"chip '{self.hw.name}' has no HBM controllers")
        srcs, dsts, sizes, ids = [], [], [], []
        for k in np.unique(chip):
            sel = chip == k
            home = self._home[int(k)]
            srcs.append(np.tile(self.num_cores + home, int(sel.sum())))
            dsts.append(np.repeat(dst[sel], home.size))
            sizes.append(np.repeat(nbytes[sel] / home.size, home.size))
            ids.append(np.repeat(gid[sel], home.size) * self.num_controllers + np.tile(home, int(sel.sum())))
        flows = (np.concatenate(srcs), np.concatenate(dsts), np.concatenate(sizes))
        return flows if group is None else flows + (np.concatenate(ids),)

    def memo_phase(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                   multicast: np.ndarray | None = None) -> PhaseCost:
        """:meth:`phase` of these flows, costed once per network (:attr:`phase_memo`, keyed
        by a digest of the flows)."""
        digest = hashlib.blake2b(digest_size=16)
        for a in (src, dst, nbytes) + (() if multicast is None else (multicast,)):
            a = np.ascontiguousarray(a)
            digest.update(f"{a.dtype}{a.shape}".encode())
            digest.update(a.data)
        key = ("phase", digest.hexdigest())
        hit = self.phase_memo.get(key)
        if hit is None:
            hit = self.phase_memo[key] = self.phase(src, dst, nbytes, multicast=multicast)
        return hit

    def hbm_load(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, group: np.ndarray | None,
                 unique_per_chip: np.ndarray) -> tuple[PhaseCost, float]:
        """An HBM load: ``(network delivery, controller time)`` of the :meth:`io_flows`
        ``src, dst, nbytes, group`` when chip ``k``'s HBM reads ``unique_per_chip[k]`` distinct
        bytes. Each chip's bytes are striped evenly over its home controllers (Elk §5), each
        reading at ``hbm_bandwidth / hbm_controllers``."""
        network = self.memo_phase(src, dst, nbytes, multicast=group)
        return network, self._controller_seconds(unique_per_chip, None)

    def io_load(self, kind: str, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                group: np.ndarray | None, unique_per_chip: np.ndarray) -> tuple[PhaseCost, float]:
        """``(network delivery, source time)`` of the :meth:`io_flows` ``src, dst, nbytes,
        group`` when chip ``k``'s source sends ``unique_per_chip[k]`` distinct bytes: its HBM
        controllers (:meth:`hbm_load`) or its host link (``host_bandwidth`` per chip)."""
        if kind == "hbm":
            return self.hbm_load(src, dst, nbytes, group, unique_per_chip)
        if kind != "host":
            raise ValueError(f"unknown I/O kind {kind!r}")
        network = self.memo_phase(src, dst, nbytes, multicast=group)
        return network, float(np.max(unique_per_chip)) / self.hw.host_bandwidth

    def _controller_seconds(self, unique_per_chip: np.ndarray, shares: np.ndarray | None) -> float:
        """Seconds the busiest controller reads: chip ``k``'s bytes split over its home
        controllers by ``shares`` (a fraction per controller; ``None``: evenly)."""
        hw = self.hw
        per_ctrl = np.zeros(hw.hbm_controllers)
        for k in range(hw.num_chips):
            home = self.home_controllers(k)
            per_ctrl[home] += unique_per_chip[k] * (1.0 / home.size if shares is None else shares[home])
        return float(per_ctrl.max()) / (hw.hbm_bandwidth / hw.hbm_controllers)

    # -- cost ------------------------------------------------------------------------------
    def phase(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
              sample_weight: float = 1.0, multicast: np.ndarray | None = None) -> PhaseCost:
        """Cost of the flows ``src[i] -> dst[i]`` of ``nbytes[i]`` bytes, all started together.

        ``multicast[i]`` (optional) numbers the data of flow ``i``: flows with the same number
        carry the same bytes from the same source, which an all-to-all exchange sends once
        (IPU exchange broadcast, Elk §5) -- the send port and the inter-chip fabric (once per
        destination chip) carry one copy; every receiver still takes its own. The mesh sends
        it along an XY multicast tree (each link once). ``sample_weight`` > 1 says the flows are a
        uniform sample of the destinations: loads that sum over many destinations (send
        ports, links, the inter-chip fabric) are scaled by it; a receive port is exact.
        """
        src = np.asarray(src, np.int64)
        dst = np.asarray(dst, np.int64)
        b = np.asarray(nbytes, np.float64)
        group = None if multicast is None else np.asarray(multicast, np.int64)
        keep = (b > 0) & (src != dst)
        if not keep.all():
            src, dst, b = src[keep], dst[keep], b[keep]
            group = None if group is None else group[keep]
        if b.size == 0:
            return NO_PHASE
        if int(dst.max()) >= self.num_cores:
            raise ValueError("transfers must end on cores")
        return self._phase(src, dst, b, float(sample_weight), group)

    def _phase(self, src: np.ndarray, dst: np.ndarray, b: np.ndarray, w: float,
               group: np.ndarray | None) -> PhaseCost:
        raise NotImplementedError

    def multicast_phase(self, pattern: MulticastPattern) -> PhaseCost:
        """Cost of a :class:`MulticastPattern`; without multicast, of its explicit flows."""
        flows = pattern.flows()
        src, dst, nbytes, weight = flows[:4]
        group = flows[4] if len(flows) > 4 else None
        return self.phase(src, dst, nbytes, weight, multicast=group)

    def _inter(self, b: np.ndarray, cross: np.ndarray, w: float) -> tuple[float, float]:
        inter = float(b[cross].sum()) * w
        if inter <= 0:
            return 0.0, 0.0
        return inter, inter / self.hw.inter_chip_bandwidth

    def _flow_alone(self, b: np.ndarray, cross: np.ndarray) -> np.ndarray:
        """Seconds each flow's bytes take on its slowest resource when alone on the network."""
        bw = np.full(b.shape, self.hw.link_bandwidth)
        if cross.any():
            bw[cross] = min(self.hw.link_bandwidth, self.hw.inter_chip_bandwidth)
        return b / bw


class AllToAllTopology(Topology):
    """IPU exchange: one port per core, served sequentially at full bandwidth (Elk §2.1)."""

    kind = "all-to-all"

    def _phase(self, src: np.ndarray, dst: np.ndarray, b: np.ndarray, w: float,
               group: np.ndarray | None) -> PhaseCost:
        n, c = self.num_cores, self.num_chips
        bw = self.hw.link_bandwidth
        recv = np.bincount(dst, weights=b, minlength=n)
        src_chip, dst_chip = self.node_chip[src], self.node_chip[dst]
        cross = src_chip != dst_chip
        if group is None:
            one = np.ones(b.size, bool)
            cross_once = cross
        else:  # one copy per multicast group leaves the sender ...
            _, first = np.unique(group, return_index=True)
            one = np.zeros(b.size, bool)
            one[first] = True
            # ... and one per destination chip crosses the inter-chip fabric
            _, first_chip = np.unique(group * c + dst_chip, return_index=True)
            cross_once = np.zeros(b.size, bool)
            cross_once[first_chip] = True
            cross_once &= cross
        from_core = one & (src < n)  # I/O nodes multicast; their rate is charged on unique bytes
        sent = np.bincount(src[from_core], weights=b[from_core], minlength=n) * w
        port_bytes = max(float(recv.max()), float(sent.max()) if sent.size else 0.0)
        inter_bytes, inter_s = self._inter(b, cross_once, w)
        latency = chunk_latency_seconds(b, self.hw, 1, cross)  # one hop through the exchange
        lat = float(latency.max())
        uncontended = float((self._flow_alone(b, cross) + latency).max())
        intra_s = port_bytes / bw
        return PhaseCost(max(intra_s, inter_s) + lat, uncontended, float(b.sum()) * w, inter_bytes,
                         intra_s, inter_s, 1, _bound_by([("ports", port_bytes)], intra_s, inter_s))


    def multicast_phase(self, pattern: MulticastPattern) -> PhaseCost:
        """Broadcast pieces: the owner's port and the inter-chip fabric (once per destination
        chip) carry one copy of each piece; every receiver's port its own bytes."""
        n, bw = self.num_cores, self.hw.link_bandwidth
        recv = np.asarray(pattern.recv_bytes, np.float64)
        rx = np.asarray(pattern.piece_receivers, np.float64)
        live = rx.sum(axis=1) > 0
        if not live.any() or not recv.any():
            return NO_PHASE
        src = np.asarray(pattern.piece_src, np.int64)[live]
        b = np.asarray(pattern.piece_bytes, np.float64)[live]
        rx = rx[live]
        w = pattern.sample_weight
        on_core = src < n
        sent = np.bincount(src[on_core], weights=b[on_core], minlength=n) * w
        src_chip = self.node_chip[src]
        foreign = rx > 0
        foreign[np.arange(src.size), src_chip] = False
        inter_bytes, inter_s = (0.0, 0.0)
        if self.num_chips > 1:
            inter_bytes = float((b * foreign.sum(axis=1)).sum()) * w
            inter_s = inter_bytes / self.hw.inter_chip_bandwidth if inter_bytes else 0.0
        crosses = foreign.any(axis=1)
        latency = chunk_latency_seconds(b, self.hw, 1, crosses)
        uncontended = float((self._flow_alone(b, crosses) + latency).max())
        intra_s = max(float(recv.max()), float(sent.max())) / bw
        return PhaseCost(max(intra_s, inter_s) + float(latency.max()), uncontended,
                         float(recv.sum()), inter_bytes, intra_s, inter_s, 1,
                         _bound_by([("ports", intra_s)], intra_s, inter_s))


class MeshTopology(Topology):
    """2D mesh (or torus) per chip, XY routing, XY multicast trees, HBM controllers on the
    edges (Elk §5, §6.1) or inside the grid as NoC nodes; see the module docstring."""

    kind = "mesh"

    def __init__(self, hw: HardwareSpec):
        super().__init__(hw)
        grid = hw.mesh_grid()
        self.rows, self.cols = grid.rows, grid.cols
        local = np.arange(self.num_cores) % self.cores_per_chip
        pos = np.array(grid.cores, np.int64).reshape(-1, 2)
        self.core_y = pos[local, 0]
        self.core_x = pos[local, 1]
        #: Wrap-around links (a torus): a ring of 3 or more nodes gets one; on 2 nodes the
        #: wrap would only duplicate the one link, so such a ring stays a line.
        self.wrap_x = grid.torus and self.cols > 2
        self.wrap_y = grid.torus and self.rows > 2
        if grid.torus:
            self.kind = "torus"  # what reports name it (the routing is the mesh's, wrapped)
        self.lh = self.cols if self.wrap_x else self.cols - 1  # east (or west) links per row
        self.lv = self.rows if self.wrap_y else self.rows - 1  # south (or north) links per column
        self.n_h = self.rows * self.lh  # east (or west) links per chip
        self.n_v = self.cols * self.lv  # south (or north) links per chip
        self.port_router, self.port_side = edge_ports(self.rows, self.cols)
        self.num_ports = self.port_router.size  # per chip: 2 * (rows + cols)
        #: Bandwidth of one edge port (an I/O node's link into an edge router): the link
        #: bandwidth, as every network link (Elk §6.1); an attribute for what-if studies.
        self.io_bandwidth = float(hw.link_bandwidth)
        #: Controllers inside the grid (NoC nodes): the ``(y, x)`` of each (global index).
        self.interior = grid.controllers is not None
        if self.interior and self.num_controllers:
            cpos = np.array(grid.controllers, np.int64).reshape(-1, 2)
            rank = np.arange(self.num_controllers) // self.num_chips  # its index on its chip
            self.ctrl_y, self.ctrl_x = cpos[rank, 0], cpos[rank, 1]
        else:
            self.ctrl_y = self.ctrl_x = np.zeros(self.num_controllers, np.int64)
        self._core_index = np.full(self.rows * self.cols, -1, np.int64)  # grid position -> core
        self._core_index[pos[:, 0] * self.cols + pos[:, 1]] = np.arange(self.cores_per_chip)
        self._entry_port: np.ndarray | None = None
        self._ctrl_links: dict[str, np.ndarray] | None = None

    def position(self, core: int) -> tuple[int, int, int]:
        """``(chip, y, x)`` of a core."""
        return int(self.node_chip[core]), int(self.core_y[core]), int(self.core_x[core])

    def core_at(self, chip: int, y: int, x: int) -> int:
        """The core at grid position ``(y, x)`` of ``chip`` (ValueError if none sits there)."""
        local = int(self._core_index[y * self.cols + x]) if 0 <= y < self.rows and 0 <= x < self.cols else -1
        if local < 0:
            raise ValueError(f"no core at ({y}, {x}) of the {self.rows} x {self.cols} grid")
        return chip * self.cores_per_chip + local

    def io_ports(self) -> list[np.ndarray]:
        """Per I/O node (controllers, then host links): the edge ports (indices into
        :func:`edge_ports` of one chip) it is wired to.

        With a multiple of 4 controllers per chip, each side of the mesh is split evenly into
        contiguous spans, one per controller (4 controllers: one side each), so that every
        core lies straight across from a port of every controller; otherwise the clockwise
        port ring is split into equal contiguous spans. A host link reaches every port.
        Controllers inside the grid have no edge port (an empty array).
        """
        P = self.num_ports
        ring = np.arange(P)
        sides = [ring[self.port_side == s] for s in range(4)]
        ports: list[np.ndarray] = [np.empty(0, np.int64)] * (self.num_controllers + self.num_chips)
        for k in range(self.num_chips):
            ctrls = self.controllers_of_chip(k)
            if self.interior:
                break
            h = ctrls.size
            if h and h % 4 == 0:
                spans = [span for side in sides for span in np.array_split(side, h // 4)]
            else:
                spans = np.array_split(ring, max(h, 1))
            for span, c in zip(spans, ctrls):
                ports[c] = span if span.size else ring
        for k in range(self.num_chips):
            ports[self.num_controllers + k] = ring
        return ports

    def side_shares(self, v: float) -> np.ndarray | None:
        """Per controller, the fraction of its chip's HBM bytes it holds when a share ``v`` of
        each tensor sits behind the top and bottom sides and ``1 - v`` behind the left and
        right ones (each side's controllers alike); ``None`` unless every controller is wired
        to one side (edge controllers, a multiple of 4 per chip, :meth:`io_ports`)."""
        if self.interior:
            return None
        shares = np.zeros(self.num_controllers)
        ports = self.io_ports()
        for k in range(self.num_chips):
            ctrls = self.controllers_of_chip(k)
            if ctrls.size == 0 or ctrls.size % 4:
                return None
            vertical = np.array([self.port_side[ports[c][0]] % 2 == 0 for c in ctrls])
            shares[ctrls[vertical]] = v / vertical.sum()
            shares[ctrls[~vertical]] = (1.0 - v) / (~vertical).sum()
        return shares

    def hbm_load(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, group: np.ndarray | None,
                 unique_per_chip: np.ndarray) -> tuple[PhaseCost, float]:
        """An HBM load on the mesh: how each tensor is sliced over a chip's controllers decides
        which edge ports carry it. Evenly (Elk §5), the controllers of the short sides (fewer
        ports for the same bytes) bind. The slicing is chosen per load: evenly; all behind one
        pair of sides (``v = 1``: top and bottom, ``v = 0``: left and right), whose busiest
        link loads ``A`` and ``B`` give the balanced share ``v = B / (A + B)``; the load takes
        the fastest of these, ``max(controller time, network time)``. For ``D`` distinct
        bytes spread evenly over a chip's cores that balances every edge port at
        ``D / (2 (rows + cols))``. (The weights a load reads are read by it alone, so their
        placement in HBM can follow their reader.) Controllers inside the grid are sliced
        evenly."""
        even = (self.memo_phase(src, dst, nbytes, multicast=group),
                self._controller_seconds(unique_per_chip, None))
        if self.side_shares(0.5) is None:
            return even
        n = self.num_cores
        io = src >= n
        h = self.home_size

        def with_split(v: float) -> tuple[PhaseCost, float]:
            shares = self.side_shares(v)
            scale = np.ones(src.size)
            scale[io] = shares[src[io] - n] * h[src[io] - n]
            net = self.memo_phase(src, dst, nbytes * scale, multicast=group)
            return net, self._controller_seconds(unique_per_chip, shares)

        vert, hori = with_split(1.0), with_split(0.0)
        options = [even, vert, hori]
        A, B = vert[0].intra_busy_s, hori[0].intra_busy_s
        if A > 0 and B > 0:
            options.append(with_split(B / (A + B)))
        return min(options, key=lambda o: max(o[0].time_s, o[1]))

    @property
    def home_size(self) -> np.ndarray:
        """Per controller, how many home controllers its chip has (io_flows' even stripes)."""
        out = np.zeros(self.num_controllers)
        for k in range(self.num_chips):
            home = self.home_controllers(k)
            out[home] = home.size
        return out

    def io_segments(self) -> list[np.ndarray]:
        """Per I/O node: local indices of the edge routers its ports attach to (grid
        positions ``y * cols + x``; none for a controller inside the grid)."""
        return [np.unique(self.port_router[p]) for p in self.io_ports()]

    @property
    def entry_port(self) -> np.ndarray:
        """``entry_port[j, l]``: the port where I/O node ``j`` injects data for destination
        local index ``l``: the nearest of its ports straight across from ``l`` (same column on
        the top/bottom side, same row on the left/right side), else its nearest port (0 for
        a controller inside the grid, which has none)."""
        if self._entry_port is None:
            cpc, cols = self.cores_per_chip, self.cols
            ly, lx = self.core_y[:cpc], self.core_x[:cpc]
            py, px = self.port_router // cols, self.port_router % cols
            table = np.zeros((self.num_controllers + self.num_chips, cpc), np.int64)
            big = 4 * (self.rows + cols)
            for j, ports in enumerate(self.io_ports()):
                if ports.size == 0:
                    continue
                dist = np.abs(ly[:, None] - py[ports][None, :]) + np.abs(lx[:, None] - px[ports][None, :])
                vertical = self.port_side[ports] % 2 == 0  # top, bottom: a column
                straight = np.where(vertical[None, :], lx[:, None] == px[ports][None, :],
                                    ly[:, None] == py[ports][None, :])
                table[j] = ports[np.argmin(dist + big * ~straight, axis=1)]
            self._entry_port = table
        return self._entry_port

    @property
    def entry(self) -> np.ndarray:
        """``entry[j, l]``: the edge router (grid position ``y * cols + x``) where I/O node
        ``j`` enters the mesh for destination local index ``l`` (the router of :attr:`entry_port`)."""
        return self.port_router[self.entry_port]

    def hops(self, s: np.ndarray, d: np.ndarray, axis: str) -> tuple[np.ndarray, np.ndarray]:
        """Per flow, ``(forward, backward)`` hops from ``s`` to ``d`` along ``axis`` (``"x"``:
        east/west, ``"y"``: south/north); one of the two is 0. On a mesh the sign of
        ``d - s`` decides; on a torus ring the shorter way round (ties go forward)."""
        size, wrap = (self.cols, self.wrap_x) if axis == "x" else (self.rows, self.wrap_y)
        if not wrap:
            diff = d - s
            return np.maximum(diff, 0), np.maximum(-diff, 0)
        fwd = (d - s) % size
        back = (size - fwd) % size
        ahead = fwd <= back
        return np.where(ahead, fwd, 0), np.where(ahead, 0, back)

    def _legs(self, kx, row, x0, east, west, bx, ky, col, y0, south, north, by):
        """Link-id ranges of route legs, in the form of :meth:`routes`: X legs on ``row`` of
        chip ``kx`` from column ``x0`` (``east`` or ``west`` hops, ``bx`` bytes), Y legs on
        column ``col`` of chip ``ky`` from row ``y0``. A leg that crosses a wrap link is two
        ranges (to the ring's end, then from its start)."""
        nc = self.num_chips
        row_base = kx * self.n_h + row * self.lh
        col_base = ky * self.n_v + col * self.lv
        legs = (
            ("east", row_base, x0, east, bx, True, self.lh, nc * self.n_h),
            ("west", row_base, x0, west, bx, False, self.lh, nc * self.n_h),
            ("south", col_base, y0, south, by, True, self.lv, nc * self.n_v),
            ("north", col_base, y0, north, by, False, self.lv, nc * self.n_v),
        )
        for name, base, start, count, weight, forward, ring, size in legs:
            mask = count > 0
            if not mask.any():
                yield name, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), size
                continue
            base, start, count, weight = base[mask], start[mask], count[mask], weight[mask]
            # forward link i goes i -> i + 1, backward link i goes i + 1 -> i (mod the ring)
            lo = start if forward else start - count
            hi = lo + count
            wrapped = (lo < 0) | (hi > ring)
            if not wrapped.any():
                yield name, base + lo, base + hi, weight, size
                continue
            lo = lo % ring
            hi = lo + count
            over = hi > ring
            yield (name, np.concatenate([base + lo, base[over]]),
                   np.concatenate([base + np.minimum(hi, ring), base[over] + hi[over] - ring]),
                   np.concatenate([weight, weight[over]]), size)

    def routes(self, k: np.ndarray, ys: np.ndarray, xs: np.ndarray, yd: np.ndarray, xd: np.ndarray,
               b: np.ndarray):
        """XY routes as link-id ranges: per direction ``(name, start, end, bytes, size)``.

        Links are numbered per chip: east link ``(y, x) -> (y, x+1)`` and west link
        ``(y, x+1) -> (y, x)`` as ``y * lh + x``; south ``(y, x) -> (y+1, x)`` and north as
        ``x * lv + y``, where ``lh = cols - 1`` and ``lv = rows - 1`` on a mesh and ``cols``
        and ``rows`` on a torus (the last link of a ring is its wrap link, ``x + 1`` taken
        modulo ``cols``). The X leg runs on the source row, the Y leg on the destination
        column, so each leg is one contiguous range of ids (two when it wraps).
        """
        east, west = self.hops(xs, xd, "x")
        south, north = self.hops(ys, yd, "y")
        yield from self._legs(k, ys, xs, east, west, b, k, xd, ys, south, north, b)

    def tree_routes(self, k: np.ndarray, ys: np.ndarray, xs: np.ndarray, yd: np.ndarray,
                    xd: np.ndarray, b: np.ndarray, tree: np.ndarray):
        """XY multicast trees as link-id ranges, in the form of :meth:`routes`.

        Flows with the same ``tree`` id share a root ``(k, ys, xs)`` and carry the same bytes;
        the packet is replicated at the routers of the union of their XY routes, so each link
        of that union carries it once: on the root row, east as far as the farthest
        destination reached eastward and west as far as the farthest reached westward (on a
        torus each destination goes the shorter way round); on each destination column, south
        and north as far as its farthest destination each way. One X range per tree and one Y
        range per (tree, destination column): the same difference-array sum as unicast.
        """
        t, first, inv = np.unique(tree, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        T = t.size
        tb = b[first]
        tk, tys, txs = k[first], ys[first], xs[first]
        # X leg on the root row: to the farthest destination column each way
        east, west = self.hops(xs, xd, "x")
        E = np.zeros(T, np.int64)
        np.maximum.at(E, inv, east)
        W = np.zeros(T, np.int64)
        np.maximum.at(W, inv, west)
        # Y legs: one per (tree, destination column), to its farthest destination row each way
        col_key = inv * self.cols + xd
        c, cfirst, cinv = np.unique(col_key, return_index=True, return_inverse=True)
        cinv = cinv.reshape(-1)
        south, north = self.hops(ys, yd, "y")
        S = np.zeros(c.size, np.int64)
        np.maximum.at(S, cinv, south)
        N = np.zeros(c.size, np.int64)
        np.maximum.at(N, cinv, north)
        ct = inv[cfirst]
        yield from self._legs(tk, tys, txs, E, W, tb, tk[ct], xd[cfirst], tys[ct], S, N, tb[ct])

    def controller_links(self) -> dict[str, np.ndarray]:
        """Per direction, which links (global ids, as :meth:`routes` numbers them) leave the
        node of a controller inside the grid: its ports into the mesh."""
        if self._ctrl_links is None:
            nc, cols, rows = self.num_chips, self.cols, self.rows
            out = {d: np.zeros(nc * self.n_h, bool) for d in ("east", "west")}
            out.update({d: np.zeros(nc * self.n_v, bool) for d in ("south", "north")})
            if self.interior:
                k = self.node_chip[self.num_cores:self.num_cores + self.num_controllers]
                y, x = self.ctrl_y, self.ctrl_x
                for name, ok, link in (
                        ("east", x < self.lh, k * self.n_h + y * self.lh + x),
                        ("west", (x >= 1) | self.wrap_x, k * self.n_h + y * self.lh + (x - 1) % cols),
                        ("south", y < self.lv, k * self.n_v + x * self.lv + y),
                        ("north", (y >= 1) | self.wrap_y, k * self.n_v + x * self.lv + (y - 1) % rows)):
                    out[name][link[ok]] = True
            self._ctrl_links = out
        return self._ctrl_links

    def _phase(self, src: np.ndarray, dst: np.ndarray, b: np.ndarray, w: float,
               group: np.ndarray | None) -> PhaseCost:
        n, cpc, cols = self.num_cores, self.cores_per_chip, self.cols
        H, C, P = self.num_controllers, self.num_chips, self.num_ports
        k = self.node_chip[dst]
        yd, xd = self.core_y[dst], self.core_x[dst]
        io = src >= n
        hbm = io & (src < n + H)  # from an HBM controller
        ctrl = hbm if self.interior else np.zeros(src.size, bool)  # ... from inside the grid
        edge = io & ~ctrl  # through an edge port
        ys = np.where(io, 0, self.core_y[np.minimum(src, n - 1)])
        xs = np.where(io, 0, self.core_x[np.minimum(src, n - 1)])
        cross = self.node_chip[src] != k
        port = np.full(src.size, -1, np.int64)  # global port id of an edge I/O flow
        if edge.any():
            j = src[edge] - n
            p = self.entry_port[j, dst[edge] % cpc]
            ent = self.port_router[p]
            ys[edge], xs[edge] = ent // cols, ent % cols
            port[edge] = (j * C + k[edge]) * P + p
        if ctrl.any():
            h = src[ctrl] - n
            ys[ctrl], xs[ctrl] = self.ctrl_y[h], self.ctrl_x[h]
        if group is None:
            tree = np.arange(src.size)  # unicast: every flow its own route
            scale = np.ones(src.size)
        else:
            # one tree per (data, destination chip, root): the data crosses the chip fabric
            # once per destination chip and enters the mesh once per edge port it uses (from
            # its own node for a controller inside the grid)
            ports_span = n + (H + C) * C * P
            root = np.where(edge, n + port, np.where(ctrl, ports_span + src - n, src))
            span = ports_span + H
            g = np.unique(group, return_inverse=True)[1].reshape(-1)
            key = (g * C + k) * span + root
            _, tree = np.unique(key, return_inverse=True)
            tree = tree.reshape(-1)
            scale = np.ones(src.size)
            if w > 1:
                # sampled destinations: a tree seen through s of its receivers stands for
                # w / s trees' worth of load when s < w (a sparse piece), for itself when its
                # receivers are dense enough that the sample spans the same tree (s >= w)
                size = np.bincount(tree)
                scale = np.maximum(1.0, w / size[tree]) / w
        once = np.zeros(src.size, bool)
        once[np.unique(tree, return_index=True)[1]] = True
        bw = self.hw.link_bandwidth
        # the loads of every resource, in bytes at link bandwidth, with the cut each one is
        cuts: list[tuple[str, float]] = []
        if edge.any():
            sel = edge & once
            inj = np.bincount(port[sel], weights=(b * scale)[sel]) * w
            cuts.append(("edge ports", float(inj.max()) * bw / self.io_bandwidth))
        cap = self.hw.hbm_injection_bandwidth
        if cap > 0 and hbm.any():
            sel = hbm & once
            inj = np.bincount(src[sel] - n, weights=(b * scale)[sel]) * w
            cuts.append(("injection", float(inj.max()) * bw / cap))
        legs = (self.routes(k, ys, xs, yd, xd, b) if group is None
                else self.tree_routes(k, ys, xs, yd, xd, b * scale, tree))
        ctrl_links = self.controller_links() if self.interior else None
        crossed = [0.0, 0.0, 0.0, 0.0]  # PhaseCost.cut_bytes
        for name, start, end, weight, size in legs:
            load = _range_loads(size, start, end, weight)
            if load is None:
                continue
            i = int(np.argmax(load))
            on_ctrl = ctrl_links is not None and bool(ctrl_links[name][i])
            cuts.append(("controller ports" if on_ctrl else "links", float(load[i]) * w))
            self._add_cut_bytes(crossed, name, load, w)
        link_max = max((v for _, v in cuts), default=0.0)
        inter_bytes, inter_s = self._inter(b * scale, cross & once, w)
        hops = (*self.hops(xs, xd, "x"), *self.hops(ys, yd, "y"))
        hops = hops[0] + hops[1] + hops[2] + hops[3] + edge + cross
        latency = chunk_latency_seconds(b, self.hw, hops, cross)
        alone = self._flow_alone(b, cross)
        if cap > 0 and hbm.any():
            alone[hbm] = np.maximum(alone[hbm], b[hbm] / cap)
        uncontended = float((alone + latency).max())
        intra_s = link_max / bw
        bound = _bound_by(cuts, intra_s, inter_s)
        return PhaseCost(max(intra_s, inter_s) + float(latency.max()), uncontended,
                         float(b.sum()) * w, inter_bytes, intra_s, inter_s, int(hops.max()), bound,
                         tuple(crossed))

    def _add_cut_bytes(self, crossed: list[float], name: str, load: np.ndarray, w: float) -> None:
        """Add to ``crossed`` (:attr:`PhaseCost.cut_bytes`) the bytes of the ``name`` links'
        ``load`` (as :meth:`routes` numbers them) that cross a middle cut: the forward link
        out of the last column (row) of the first half goes first half -> second half, its
        backward twin the other way; on a torus the wrap link crosses too, the other way."""
        horizontal = name in ("east", "west")
        size, ring, wrap = ((self.cols, self.lh, self.wrap_x) if horizontal
                            else (self.rows, self.lv, self.wrap_y))
        if size < 2:
            return
        per_line = load.reshape(-1, ring)  # (chip x row, link) or (chip x column, link)
        middle = float(per_line[:, size // 2 - 1].sum()) * w
        around = float(per_line[:, size - 1].sum()) * w if wrap else 0.0
        forward = name in ("east", "south")
        first = 0 if horizontal else 2  # index of "first half -> second half"
        crossed[first + (0 if forward else 1)] += middle
        crossed[first + (1 if forward else 0)] += around


def _bound_by(cuts: list[tuple[str, float]], intra_s: float, inter_s: float) -> str:
    """The cut that bounds a phase: the inter-chip fabric when it is the slowest resource,
    else the first on-chip resource with the largest load ("" when nothing moved)."""
    if inter_s > intra_s:
        return "inter-chip"
    if intra_s <= 0 or not cuts:
        return ""
    top = max(v for _, v in cuts)
    return next(name for name, v in cuts if v == top)


def _range_loads(size: int, start: np.ndarray, end: np.ndarray, weight: np.ndarray) -> np.ndarray | None:
    """Per id in ``[0, size)``, the sum of ``weight[i]`` over ranges ``[start[i], end[i])``
    covering it (``None`` when there are no ranges)."""
    if start.size == 0 or size == 0:
        return None
    diff = np.bincount(start, weights=weight, minlength=size + 1)
    diff -= np.bincount(end, weights=weight, minlength=size + 1)
    return np.cumsum(diff[:size])


def link_loads(topo: MeshTopology, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> dict[str, np.ndarray]:
    """Bytes on every directed link (``east``/``west``/``south``/``north`` arrays, chip-major)
    for core-to-core flows; what :meth:`MeshTopology.phase` maximizes over (for inspection)."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    b = np.asarray(nbytes, np.float64)
    k = topo.node_chip[dst]
    out = {}
    for name, start, end, weight, size in topo.routes(
            k, topo.core_y[src], topo.core_x[src], topo.core_y[dst], topo.core_x[dst], b):
        load = _range_loads(size, start, end, weight)
        out[name] = np.zeros(size) if load is None else load
    return out


def _network_key(hw: HardwareSpec) -> str:
    """``hw`` as far as its phases depend on it: every field but its name, notes and the
    HBM and host bandwidths (which time the sources of a load, not its network delivery)."""
    fields = hw.to_dict()
    for name in ("name", "notes", "hbm_bandwidth", "host_bandwidth"):
        fields.pop(name, None)
    return json.dumps(fields, sort_keys=True, default=str)


@lru_cache(maxsize=16)
def _network_memo(key: str) -> dict[tuple, Any]:
    """The phase memo of one network (:attr:`Topology.phase_memo`), shared by its chips."""
    del key  # the cache's key: one memo per network
    return {}


@lru_cache(maxsize=16)
def make_topology(hw: HardwareSpec) -> Topology:
    """The network of ``hw`` (cached per spec: the mesh entry tables are built once)."""
    if hw.topology == "mesh":
        return MeshTopology(hw)
    return AllToAllTopology(hw)


__all__ = [
    "AllToAllTopology", "MeshTopology", "MulticastPattern", "NO_PHASE", "PhaseCost", "Topology", "link_loads",
    "edge_ports", "make_topology", "mesh_shape", "perimeter", "relayout_pattern",
]
