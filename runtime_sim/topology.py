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
  (row-major); each core drives its up to 4 neighbour links at once; dimension-order (XY)
  routing; contention is the maximum load over directed links. HBM controllers (and the host
  link) attach to the mesh edges: the perimeter of each chip is split evenly among its
  controllers, each perimeter core has an injection link from its controller, and traffic
  enters at the perimeter core of the controller's segment nearest to the destination.
  There is no in-network multicast: every destination receives its own copy.
* Multi-chip (both): traffic between chips shares one capped fabric of
  ``inter_chip_bandwidth`` bytes/s (Elk §5 tracks "in-flight inter-chip transfer events and
  cap[s] their total bandwidth"; 640 GB/s for IPU-POD4). On the mesh, a cross-chip flow first
  crosses the chip dimension (landing at the same grid position in the destination chip),
  then routes X then Y: dimension order with the chip index as the outermost dimension.
  The Elk artifact's alternative, a x1.25 communication factor beyond 1,472 cores, is not
  applied on top of the explicit cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from .hardware import HardwareSpec
from .links import chunk_latency_seconds


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

    def io_flows(self, kind: str, dst: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flows that deliver ``nbytes[i]`` to core ``dst[i]`` from HBM or the host.

        HBM data is striped evenly over the home controllers of the destination's chip (Elk §5
        "evenly slice each tensor across all HBM modules"); host data comes over the
        destination chip's own host link.
        """
        dst = np.asarray(dst, np.int64)
        nbytes = np.asarray(nbytes, np.float64)
        chip = self.node_chip[dst]
        if kind == "host":
            return self.num_cores + self.num_controllers + chip, dst, nbytes
        if kind != "hbm":
            raise ValueError(f"unknown I/O kind {kind!r}")
        if self.num_controllers == 0:
            raise ValueError(f"chip '{self.hw.name}' has no HBM controllers")
        srcs, dsts, sizes = [], [], []
        for k in np.unique(chip):
            sel = chip == k
            home = self._home[int(k)]
            srcs.append(np.tile(self.num_cores + home, int(sel.sum())))
            dsts.append(np.repeat(dst[sel], home.size))
            sizes.append(np.repeat(nbytes[sel] / home.size, home.size))
        return np.concatenate(srcs), np.concatenate(dsts), np.concatenate(sizes)

    # -- cost ------------------------------------------------------------------------------
    def phase(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
              sample_weight: float = 1.0, multicast: np.ndarray | None = None) -> PhaseCost:
        """Cost of the flows ``src[i] -> dst[i]`` of ``nbytes[i]`` bytes, all started together.

        ``multicast[i]`` (optional) numbers the data of flow ``i``: flows with the same number
        carry the same bytes from the same source, which an all-to-all exchange sends once
        (IPU exchange broadcast, Elk §5) -- the send port and the inter-chip fabric (once per
        destination chip) carry one copy; every receiver still takes its own. The mesh has no
        in-network multicast and ignores it. ``sample_weight`` > 1 says the flows are a
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
        src, dst, nbytes, weight = pattern.flows()
        return self.phase(src, dst, nbytes, weight)

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
    """2D mesh per chip, XY routing, HBM controllers on the edges (Elk §5, §6.1)."""

    kind = "mesh"

    def __init__(self, hw: HardwareSpec):
        super().__init__(hw)
        self.rows, self.cols = mesh_shape(self.cores_per_chip)
        local = np.arange(self.num_cores) % self.cores_per_chip
        self.core_y = local // self.cols
        self.core_x = local % self.cols
        self.n_h = self.rows * (self.cols - 1)  # east (or west) links per chip
        self.n_v = self.cols * (self.rows - 1)  # south (or north) links per chip
        self._entry: np.ndarray | None = None

    def position(self, core: int) -> tuple[int, int, int]:
        """``(chip, y, x)`` of a core."""
        return int(self.node_chip[core]), int(self.core_y[core]), int(self.core_x[core])

    def core_at(self, chip: int, y: int, x: int) -> int:
        return chip * self.cores_per_chip + y * self.cols + x

    def io_segments(self) -> list[np.ndarray]:
        """Per I/O node (controllers, then host links): local indices of its edge cores."""
        edge = perimeter(self.rows, self.cols)
        segments: list[np.ndarray] = [np.empty(0, np.int64)] * (self.num_controllers + self.num_chips)
        for k in range(self.num_chips):
            ctrls = self.controllers_of_chip(k)
            for part, h in zip(np.array_split(edge, max(ctrls.size, 1)), ctrls):
                segments[h] = part if part.size else edge
        for k in range(self.num_chips):
            segments[self.num_controllers + k] = edge  # the host link reaches the whole edge
        return segments

    @property
    def entry(self) -> np.ndarray:
        """``entry[j, l]``: the edge core (local index) where I/O node ``j`` enters the mesh
        for destination local index ``l`` -- the nearest core of its segment."""
        if self._entry is None:
            cpc = self.cores_per_chip
            ly, lx = np.arange(cpc) // self.cols, np.arange(cpc) % self.cols
            table = np.empty((self.num_controllers + self.num_chips, cpc), np.int64)
            for j, seg in enumerate(self.io_segments()):
                dist = np.abs(ly[:, None] - (seg // self.cols)[None, :]) + np.abs(
                    lx[:, None] - (seg % self.cols)[None, :])
                table[j] = seg[np.argmin(dist, axis=1)]
            self._entry = table
        return self._entry

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

    def _phase(self, src: np.ndarray, dst: np.ndarray, b: np.ndarray, w: float,
               group: np.ndarray | None) -> PhaseCost:
        n, cpc, cols = self.num_cores, self.cores_per_chip, self.cols
        k = self.node_chip[dst]
        yd, xd = self.core_y[dst], self.core_x[dst]
        io = src >= n
        ys = np.where(io, 0, self.core_y[np.minimum(src, n - 1)])
        xs = np.where(io, 0, self.core_x[np.minimum(src, n - 1)])
        inj_load = 0.0
        if io.any():
            j = src[io] - n
            ent = self.entry[j, dst[io] % cpc]
            ys[io], xs[io] = ent // cols, ent % cols
            inj = np.bincount(j * cpc + ent, weights=b[io]) * w
            inj_load = float(inj.max())
        cross = self.node_chip[src] != k
        bw = self.hw.link_bandwidth
        link_max = inj_load
        for _, start, end, weight, size in self.routes(k, ys, xs, yd, xd, b):
            link_max = max(link_max, _range_max(size, start, end, weight) * w)
        inter_bytes, inter_s = self._inter(b, cross, w)
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
    "make_topology", "mesh_shape", "perimeter",
]
