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

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from runtime_sim.contract.hardware import HardwareSpec
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
                         self.inter_busy_s * count, self.max_hops)

    def __add__(self, other: "PhaseCost") -> "PhaseCost":
        return PhaseCost(self.time_s + other.time_s, self.uncontended_s + other.uncontended_s,
                         self.intra_bytes + other.intra_bytes, self.inter_bytes + other.inter_bytes,
                         self.intra_busy_s + other.intra_busy_s,
                         self.inter_busy_s + other.inter_busy_s, max(self.max_hops, other.max_hops))


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


def mesh_shape(cores: int) -> tuple[int, int]:
    """``(rows, cols)`` of the most square grid with exactly ``cores`` cores (rows <= cols).

    An exact factorization keeps every row full, so XY routes never pass through a missing
    core; 1,472 IPU cores give 32 x 46. A prime count degenerates to a 1 x n line.
    """
    rows = max(r for r in range(1, math.isqrt(cores) + 1) if cores % r == 0)
    return rows, cores // rows


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

    def hbm_load(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, group: np.ndarray | None,
                 unique_per_chip: np.ndarray) -> tuple[PhaseCost, float]:
        """An HBM load: ``(network delivery, controller time)`` of the :meth:`io_flows`
        ``src, dst, nbytes, group`` when chip ``k``'s HBM reads ``unique_per_chip[k]`` distinct
        bytes. Each chip's bytes are striped evenly over its home controllers (Elk §5), each
        reading at ``hbm_bandwidth / hbm_controllers``."""
        network = self.phase(src, dst, nbytes, multicast=group)
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
        network = self.phase(src, dst, nbytes, multicast=group)
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
                         intra_s, inter_s, 1)


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
                         float(recv.sum()), inter_bytes, intra_s, inter_s, 1)


class MeshTopology(Topology):
    """2D mesh per chip, XY routing, XY multicast trees, HBM controllers on the edges (Elk §5,
    §6.1); see the module docstring."""

    kind = "mesh"

    def __init__(self, hw: HardwareSpec):
        super().__init__(hw)
        self.rows, self.cols = mesh_shape(self.cores_per_chip)
        local = np.arange(self.num_cores) % self.cores_per_chip
        self.core_y = local // self.cols
        self.core_x = local % self.cols
        self.n_h = self.rows * (self.cols - 1)  # east (or west) links per chip
        self.n_v = self.cols * (self.rows - 1)  # south (or north) links per chip
        self.port_router, self.port_side = edge_ports(self.rows, self.cols)
        self.num_ports = self.port_router.size  # per chip: 2 * (rows + cols)
        #: Bandwidth of one edge port (an I/O node's link into an edge router): the link
        #: bandwidth, as every network link (Elk §6.1); an attribute for what-if studies.
        self.io_bandwidth = float(hw.link_bandwidth)
        self._entry_port: np.ndarray | None = None

    def position(self, core: int) -> tuple[int, int, int]:
        """``(chip, y, x)`` of a core."""
        return int(self.node_chip[core]), int(self.core_y[core]), int(self.core_x[core])

    def core_at(self, chip: int, y: int, x: int) -> int:
        return chip * self.cores_per_chip + y * self.cols + x

    def io_ports(self) -> list[np.ndarray]:
        """Per I/O node (controllers, then host links): the edge ports (indices into
        :func:`edge_ports` of one chip) it is wired to.

        With a multiple of 4 controllers per chip, each side of the mesh is split evenly into
        contiguous spans, one per controller (4 controllers: one side each), so that every
        core lies straight across from a port of every controller; otherwise the clockwise
        port ring is split into equal contiguous spans. A host link reaches every port.
        """
        P = self.num_ports
        ring = np.arange(P)
        sides = [ring[self.port_side == s] for s in range(4)]
        ports: list[np.ndarray] = [np.empty(0, np.int64)] * (self.num_controllers + self.num_chips)
        for k in range(self.num_chips):
            ctrls = self.controllers_of_chip(k)
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
        to one side (a multiple of 4 controllers per chip, :meth:`io_ports`)."""
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
        placement in HBM can follow their reader.)"""
        even = self.phase(src, dst, nbytes, multicast=group), self._controller_seconds(unique_per_chip, None)
        if self.side_shares(0.5) is None:
            return even
        n = self.num_cores
        io = src >= n
        h = self.home_size

        def with_split(v: float) -> tuple[PhaseCost, float]:
            shares = self.side_shares(v)
            scale = np.ones(src.size)
            scale[io] = shares[src[io] - n] * h[src[io] - n]
            net = self.phase(src, dst, nbytes * scale, multicast=group)
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
        """Per I/O node: local indices of the edge cores (routers) its ports attach to."""
        return [np.unique(self.port_router[p]) for p in self.io_ports()]

    @property
    def entry_port(self) -> np.ndarray:
        """``entry_port[j, l]``: the port where I/O node ``j`` injects data for destination
        local index ``l``: the nearest of its ports straight across from ``l`` (same column on
        the top/bottom side, same row on the left/right side), else its nearest port."""
        if self._entry_port is None:
            cpc, cols = self.cores_per_chip, self.cols
            ly, lx = np.arange(cpc) // cols, np.arange(cpc) % cols
            py, px = self.port_router // cols, self.port_router % cols
            table = np.empty((self.num_controllers + self.num_chips, cpc), np.int64)
            big = 4 * (self.rows + cols)
            for j, ports in enumerate(self.io_ports()):
                dist = np.abs(ly[:, None] - py[ports][None, :]) + np.abs(lx[:, None] - px[ports][None, :])
                vertical = self.port_side[ports] % 2 == 0  # top, bottom: a column
                straight = np.where(vertical[None, :], lx[:, None] == px[ports][None, :],
                                    ly[:, None] == py[ports][None, :])
                table[j] = ports[np.argmin(dist + big * ~straight, axis=1)]
            self._entry_port = table
        return self._entry_port

    @property
    def entry(self) -> np.ndarray:
        """``entry[j, l]``: the edge core (local index) where I/O node ``j`` enters the mesh
        for destination local index ``l`` (the router of :attr:`entry_port`)."""
        return self.port_router[self.entry_port]

    def routes(self, k: np.ndarray, ys: np.ndarray, xs: np.ndarray, yd: np.ndarray, xd: np.ndarray,
               b: np.ndarray):
        """XY routes as link-id ranges: per direction ``(name, start, end, bytes, size)``.

        Links are numbered per chip: east link ``(y, x) -> (y, x+1)`` and west link
        ``(y, x+1) -> (y, x)`` as ``y * (cols - 1) + x``; south ``(y, x) -> (y+1, x)`` and north
        as ``x * (rows - 1) + y``. The X leg runs on the source row, the Y leg on the
        destination column, so each leg is one contiguous range of ids.
        """
        cols, rows = self.cols, self.rows
        row_base = k * self.n_h + ys * (cols - 1)
        col_base = k * self.n_v + xd * (rows - 1)
        legs = (
            ("east", xd > xs, row_base, xs, xd, self.num_chips * self.n_h),
            ("west", xd < xs, row_base, xd, xs, self.num_chips * self.n_h),
            ("south", yd > ys, col_base, ys, yd, self.num_chips * self.n_v),
            ("north", yd < ys, col_base, yd, ys, self.num_chips * self.n_v),
        )
        for name, mask, base, lo, hi, size in legs:
            if mask.any():
                yield name, base[mask] + lo[mask], base[mask] + hi[mask], b[mask], size
            else:
                yield name, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), size

    def tree_routes(self, k: np.ndarray, ys: np.ndarray, xs: np.ndarray, yd: np.ndarray,
                    xd: np.ndarray, b: np.ndarray, tree: np.ndarray):
        """XY multicast trees as link-id ranges, in the form of :meth:`routes`.

        Flows with the same ``tree`` id share a root ``(k, ys, xs)`` and carry the same bytes;
        the packet is replicated at the routers of the union of their XY routes, so each link
        of that union carries it once: on the root row, east up to the easternmost destination
        column and west down to the westernmost; on each destination column, south down to its
        southernmost destination and north up to its northernmost. One X range per tree and
        one Y range per (tree, destination column): the same difference-array sum as unicast.
        """
        t, first, inv = np.unique(tree, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        T = t.size
        tb = b[first]
        tk, tys, txs = k[first], ys[first], xs[first]
        # X leg on the root row: to the extreme destination columns
        xmax = np.full(T, -1, np.int64)
        np.maximum.at(xmax, inv, xd)
        xmin = np.full(T, self.cols, np.int64)
        np.minimum.at(xmin, inv, xd)
        east, west = np.maximum(xmax, txs), np.minimum(xmin, txs)
        # Y legs: one per (tree, destination column), to its extreme destination rows
        col_key = inv * self.cols + xd
        c, cfirst, cinv = np.unique(col_key, return_index=True, return_inverse=True)
        cinv = cinv.reshape(-1)
        ymax = np.full(c.size, -1, np.int64)
        np.maximum.at(ymax, cinv, yd)
        ymin = np.full(c.size, self.rows, np.int64)
        np.minimum.at(ymin, cinv, yd)
        ct = inv[cfirst]
        cys, cx = tys[ct], xd[cfirst]
        south, north = np.maximum(ymax, cys), np.minimum(ymin, cys)
        # pseudo-flows: pure X (same row) and pure Y (same column) routes
        K = np.concatenate([tk, tk, tk[ct], tk[ct]])
        YS = np.concatenate([tys, tys, cys, cys])
        XS = np.concatenate([txs, txs, cx, cx])
        YD = np.concatenate([tys, tys, south, north])
        XD = np.concatenate([east, west, cx, cx])
        B = np.concatenate([tb, tb, tb[ct], tb[ct]])
        yield from self.routes(K, YS, XS, YD, XD, B)

    def _phase(self, src: np.ndarray, dst: np.ndarray, b: np.ndarray, w: float,
               group: np.ndarray | None) -> PhaseCost:
        n, cpc, cols = self.num_cores, self.cores_per_chip, self.cols
        k = self.node_chip[dst]
        yd, xd = self.core_y[dst], self.core_x[dst]
        io = src >= n
        ys = np.where(io, 0, self.core_y[np.minimum(src, n - 1)])
        xs = np.where(io, 0, self.core_x[np.minimum(src, n - 1)])
        cross = self.node_chip[src] != k
        port = np.full(src.size, -1, np.int64)  # global port id of an I/O flow
        if io.any():
            j = src[io] - n
            p = self.entry_port[j, dst[io] % cpc]
            ent = self.port_router[p]
            ys[io], xs[io] = ent // cols, ent % cols
            port[io] = (j * self.num_chips + k[io]) * self.num_ports + p
        if group is None:
            tree = np.arange(src.size)  # unicast: every flow its own route
            scale = np.ones(src.size)
        else:
            # one tree per (data, destination chip, root): the data crosses the chip fabric
            # once per destination chip and enters the mesh once per edge port it uses
            root = np.where(io, n + port, src)
            span = n + (self.num_controllers + self.num_chips) * self.num_chips * self.num_ports
            g = np.unique(group, return_inverse=True)[1].reshape(-1)
            key = (g * self.num_chips + k) * span + root
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
        inj_load = 0.0
        if io.any():
            sel = io & once
            inj = np.bincount(port[sel], weights=(b * scale)[sel]) * w
            inj_load = float(inj.max()) * self.hw.link_bandwidth / self.io_bandwidth
        bw = self.hw.link_bandwidth
        link_max = inj_load
        legs = (self.routes(k, ys, xs, yd, xd, b) if group is None
                else self.tree_routes(k, ys, xs, yd, xd, b * scale, tree))
        for _, start, end, weight, size in legs:
            link_max = max(link_max, _range_max(size, start, end, weight) * w)
        inter_bytes, inter_s = self._inter(b * scale, cross & once, w)
        hops = np.abs(xd - xs) + np.abs(yd - ys) + io + cross
        latency = chunk_latency_seconds(b, self.hw, hops, cross)
        uncontended = float((self._flow_alone(b, cross) + latency).max())
        intra_s = link_max / bw
        return PhaseCost(max(intra_s, inter_s) + float(latency.max()), uncontended,
                         float(b.sum()) * w, inter_bytes, intra_s, inter_s, int(hops.max()))


def _range_max(size: int, start: np.ndarray, end: np.ndarray, weight: np.ndarray) -> float:
    """Max over ids of the sum of ``weight[i]`` over ranges ``[start[i], end[i])`` covering it."""
    if start.size == 0 or size == 0:
        return 0.0
    diff = np.bincount(start, weights=weight, minlength=size + 1)
    diff -= np.bincount(end, weights=weight, minlength=size + 1)
    return float(np.cumsum(diff[:size]).max())


def link_loads(topo: MeshTopology, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> dict[str, np.ndarray]:
    """Bytes on every directed link (``east``/``west``/``south``/``north`` arrays, chip-major)
    for core-to-core flows; what :meth:`MeshTopology.phase` maximizes over (for inspection)."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    b = np.asarray(nbytes, np.float64)
    k = topo.node_chip[dst]
    out = {}
    for name, start, end, weight, size in topo.routes(
            k, topo.core_y[src], topo.core_x[src], topo.core_y[dst], topo.core_x[dst], b):
        diff = np.bincount(start, weights=weight, minlength=size + 1)
        diff -= np.bincount(end, weights=weight, minlength=size + 1)
        out[name] = np.cumsum(diff[:size])
    return out


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
