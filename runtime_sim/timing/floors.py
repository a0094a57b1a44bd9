"""Resource floors of a timing run: what no schedule of its programs can beat, per resource.

Every floor is the work a run gives one resource divided by the most that resource can do
per second; a run takes at least each of them, so ``total_s >= max(floors)``, the run is
*bound by* the largest (``run_bound_by``, ``floor_s``), and a run much slower than its largest
floor says where the rest of its time goes (:func:`time_parts`, the report's ``remainder``).
The floors (seconds; 0 where the resource does not exist on the chip):

* ``compute_floor_s = flops / peak_matrix_flops``: all FLOPs at every core's matrix peak;
* ``compute_units_floor_s = sum_op flops_op / peak_flops(unit_op, dtype_op)``: each operator's
  FLOPs at the peak of the unit that runs it (matrix unit for sums of products, vector unit
  otherwise, ``schedules`` templates) at the rate of its dtype; operators run one after another on the compute array, so this
  tighter form is a floor too (and ``>= compute_floor_s``);
* ``hbm_floor_s = hbm_bytes / hbm_bandwidth``: the distinct HBM bytes at the full HBM
  bandwidth;
* ``host_floor_s = (host_in_bytes + host_out_bytes) / (host_bandwidth x chips)``: both
  directions share a chip's host link (:mod:`runtime_sim.timing.work`);
* ``interconnect_floor_s = received / (receive ports x link_bandwidth [+ inter-chip cap])``:
  the bytes cores receive over links (``link_bytes``) over the aggregate rate at which cores
  can receive. On the all-to-all exchange a core has one port (Elk §2.1): ``cores x
  link_bandwidth``. On a mesh a core receives on each of its up to 4 neighbour links at once
  (Elk §6.1) and an edge router also on its free edge ports (each I/O node's own span,
  :meth:`~runtime_sim.machine.mesh_topology.MeshTopology.io_ports`), and a flow from another chip
  lands on the core at its source's grid position (the inter-chip cap is added);
* ``edge_ports_floor_s = hbm_sent / (sum_j |ports_j| x io_bandwidth)`` (a mesh with its HBM
  controllers on the edges, Elk §5): every byte a chip reads from HBM enters its mesh through
  an edge port of a controller's span, at ``io_bandwidth`` each (``hbm_sent`` =
  ``hbm_delivered_bytes``: what the controllers read, a copy per chip; ``2 (rows + cols)``
  ports per chip when the spans partition the ring);
* ``controller_ports_floor_s = hbm_sent / (sum_h links_out(h) x link_bandwidth)`` (HBM
  controllers inside the grid): a controller's bytes leave its node through its up to 4 links;
* ``injection_floor_s = hbm_sent / (controllers x hbm_injection_bandwidth)`` (when the chip
  caps injection);
* ``bisection_floor_s = max_d crossed_d / (links_d x link_bandwidth)`` (a mesh with 2 or more
  columns or rows): ``crossed_d`` the bytes every transfer phase and load delivery carries
  across the middle cut of the chips' grids in direction ``d`` (left -> right, right -> left,
  top -> bottom, bottom -> top) under the chip's XY routing
  (:attr:`~runtime_sim.machine.phase_cost.PhaseCost.cut_bytes`), ``links_d`` the links that cross
  it that way (one per row or column and chip, two on a torus ring);
* ``inter_chip_floor_s = inter-chip bytes / inter_chip_bandwidth`` (several chips): every phase's
  bytes that cross chips, loads included, on the capped fabric (Elk §5).

Why they hold: operators execute one after another and each transfer phase lasts at least its
busiest resource's load over its bandwidth (:mod:`runtime_sim.machine.topology`); a load that
overlaps an execution gets only the link share the execution leaves
(:func:`runtime_sim.machine.stream_timing.preload_link_share`), so the link-seconds of
executions and loads together never exceed the elapsed time. The ``"ideal"`` design (Elk
§6.1) gives preloads their own interconnect and distributes in no time: its link floors take
the larger of the executions' bytes (distributions left out) and the loads' bytes.

Utilizations (each in [0, 1]): ``interconnect_utilization`` is :func:`busy_fraction` of the
link-busy intervals (hop latency excluded); ``link_bandwidth_utilization`` is the received
bytes over ``total_s`` x the receive capacity of every interconnect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from runtime_sim.contract.expr import TensorExpr, dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.machine.mesh_topology import MeshTopology
from runtime_sim.machine.phase_cost import PhaseCost
from runtime_sim.machine.topology import make_topology
from runtime_sim.machine.topology_base import Topology
from runtime_sim.timing.events import Slot
from runtime_sim.timing.work import Work
from schedules import template_for
from schedules.base import compute_dtype

__all__ = ["FLOOR_KEYS", "RunTraffic", "block_receive_bytes", "bound_name", "busy_fraction",
           "execute_bound_seconds", "interconnect_windows", "peak_seconds", "receive_capacity",
           "remainder", "resource_floors", "run_bound", "run_traffic", "shares", "time_parts",
           "weight_receive_bytes"]

#: The floors, in the order ties are broken (the first largest names the bound).
FLOOR_KEYS = ("compute_floor_s", "compute_units_floor_s", "hbm_floor_s", "host_floor_s",
              "interconnect_floor_s", "edge_ports_floor_s", "controller_ports_floor_s",
              "injection_floor_s", "bisection_floor_s", "inter_chip_floor_s")
#: A run whose time is more than this many times its largest floor says where the rest goes
#: (issue 38: "where the time exceeds the largest floor by more than 1.5x").
REMAINDER_FACTOR = 1.5


def bound_name(key: str) -> str:
    """The resource a floor key names, as ``run_bound_by`` and ``load_bound_by`` spell it:
    ``edge_ports_floor_s`` -> ``"edge ports"``, ``inter_chip_floor_s`` -> ``"inter-chip"``."""
    name = key[:-len("_floor_s")]
    return "inter-chip" if name == "inter_chip" else name.replace("_", " ")


def peak_seconds(flops: float, expr: TensorExpr, hw: HardwareSpec) -> float:
    """Seconds ``flops`` of the operator ``expr`` take at the peak of the unit that runs it on
    every core of ``hw``, at the rate of the dtype it computes in
    (:func:`schedules.base.compute_dtype`): the per-operator ``flops`` lower bound and the
    compute-units floor."""
    unit = getattr(template_for(expr.kind), "unit", "vector")
    return flops / hw.peak_flops(unit, compute_dtype(expr))


def block_receive_bytes(rows: int, k: int, cols: int, cores: int, in_bytes: int = 2,
                        out_bytes: int = 2) -> float:
    """Least bytes a core receives in a product ``[rows, k] x [k, cols]`` whose right operand
    (the weight) is spread over ``cores`` in equal blocks ``dk x dn``, one copy of each
    element (``dk dn = k cols / cores``), over every block shape.

    A core holding a block must receive the ``rows x dk`` slice of the left operand it
    multiplies (``in_bytes`` each) and, when ``dk < k``, take part in summing the
    ``k / dk`` partial ``rows x dn`` results of its column group: at least one partial per
    core (``out_bytes`` each). With ``A = k cols / cores``, the bytes
    ``f(dk) = in rows dk + out rows A / dk`` are least at ``dk* = sqrt(out A / in)`` (clamped
    to ``[A / cols, k]``), ``2 rows sqrt(in out A)``; a block of whole columns (``dk = k``)
    needs no partial sums and receives ``in rows k``. The result is the smaller; blocks of
    integer sides can only receive more. Fewer cores only enlarge the blocks, so a plan on
    part of the chip receives at least this too.

    This is the receive side of the execution/preload trade-off of Elk §2.2-3.3 (every core
    holding a weight block is reached by the activation broadcast). It is not a floor of
    every plan: a plan that copies weight blocks at preload time (Elk §3.3) trades these
    bytes for preload bytes, so :func:`resource_floors` does not count it.
    """
    if min(rows, k, cols, cores) <= 0:
        return 0.0
    area = k * cols / min(cores, k * cols)
    whole = float(in_bytes * rows * k)
    dk = min(max(math.sqrt(out_bytes * area / in_bytes), area / cols), k)
    split = in_bytes * rows * dk + out_bytes * rows * area / dk
    return min(whole, split)


def weight_receive_bytes(expr: TensorExpr, cores: int) -> float | None:
    """:func:`block_receive_bytes` of a sum of products whose two operands share no spatial
    axis (``x[b, k] @ w[k, n]``: a layer's weight times its activations), with whichever
    operand is held in blocks receiving the least (the weight, for a decode step); ``None``
    for anything else (attention's per-sequence products, elementwise operators)."""
    body = [t for i, t in enumerate(expr.inputs) if i not in expr.epilogue_inputs]
    if expr.kind != "matmul" or len(body) != 2 or not expr.reduce_axes:
        return None
    reduce = set(expr.reduce_axes)
    spatial = [set(t.axes) - reduce for t in body]
    if spatial[0] & spatial[1] or not all(set(t.axes) & reduce for t in body):
        return None
    size = [math.prod(expr.extent(a) for a in s) for s in spatial]
    k = math.prod(expr.extent(a) for a in reduce)
    out = dtype_bytes(expr.output.dtype)
    return min(block_receive_bytes(size[1 - held], k, size[held], cores,
                                   dtype_bytes(body[1 - held].dtype), out) for held in (0, 1))


def execute_bound_seconds(expr: TensorExpr, flops: float, hw: HardwareSpec) -> float:
    """Least time an execution of ``expr`` takes under plans that keep one copy of its weight
    spread over the cores: its FLOPs at peak (:func:`peak_seconds`) then, since an operator's
    steps compute and then exchange (bulk-synchronous, :mod:`runtime_sim.timing.opcost`),
    :func:`weight_receive_bytes` at one core's ``link_bandwidth``; :func:`peak_seconds` alone
    for operators without a weight operand."""
    received = weight_receive_bytes(expr, hw.num_cores) or 0.0
    return peak_seconds(flops, expr, hw) + received / hw.link_bandwidth


@dataclass
class RunTraffic:
    """What a run asks of each resource (the inputs of :func:`resource_floors`).

    Link bytes and cut bytes come in two parts, what executions move (``exec_*``: re-layouts,
    shifts, replica reductions, distributions) and what loads deliver (``load_*``), because
    the ideal design moves them on two interconnects; ``free_bytes`` are the execution bytes
    that took no time (the ideal design's distributions).
    """

    flops: float = 0.0
    unit_s: float = 0.0  # sum over operators of peak_seconds
    hbm_bytes: float = 0.0  # distinct
    hbm_sent_bytes: float = 0.0  # what the controllers read (a copy per chip)
    host_bytes: float = 0.0  # both directions
    exec_link_bytes: float = 0.0
    load_link_bytes: float = 0.0
    free_bytes: float = 0.0
    exec_cut_bytes: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    load_cut_bytes: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    exec_inter_bytes: float = 0.0
    load_inter_bytes: float = 0.0
    ideal: bool = False

    def add_phase(self, phase: PhaseCost, load: bool) -> None:
        """Count a transfer phase's cut and inter-chip bytes (an execution's or a load's)."""
        if load:
            self.load_cut_bytes = tuple(a + b for a, b in zip(self.load_cut_bytes, phase.cut_bytes))
            self.load_inter_bytes += phase.inter_bytes
        else:
            self.exec_cut_bytes = tuple(a + b for a, b in zip(self.exec_cut_bytes, phase.cut_bytes))
            self.exec_inter_bytes += phase.inter_bytes

    def _split(self, exec_value: float, load_value: float) -> float:
        """What a link floor counts: both together on one interconnect, the larger of the
        two on the ideal design's two."""
        return max(exec_value, load_value) if self.ideal else exec_value + load_value

    @property
    def received_bytes(self) -> float:
        """Bytes cores receive over links that cost link time (``link_bytes`` without the
        ideal design's free distributions), as the interconnect floor counts them."""
        return self._split(self.exec_link_bytes - self.free_bytes, self.load_link_bytes)

    @property
    def cut_bytes(self) -> tuple[float, ...]:
        return tuple(self._split(e, l) for e, l in zip(self.exec_cut_bytes, self.load_cut_bytes))

    @property
    def inter_bytes(self) -> float:
        return self._split(self.exec_inter_bytes, self.load_inter_bytes)


def run_traffic(works: Sequence[Work], per_op: Sequence[Any], hbm_bytes: float,
                hw: HardwareSpec, ideal: bool) -> RunTraffic:
    """The :class:`RunTraffic` of a timed run: its work items and their report rows
    (:class:`~runtime_sim.timing.timing_report.OpTiming`, in the same order), the run's distinct HBM
    bytes, and whether its design is the ideal one."""
    traffic = RunTraffic(hbm_bytes=hbm_bytes, ideal=ideal)
    for work, op in zip(works, per_op):
        traffic.flops += op.flops
        traffic.unit_s += peak_seconds(op.flops, work.op.expr, hw)
        traffic.hbm_sent_bytes += op.hbm_delivered_bytes
        traffic.host_bytes += op.host_in_bytes + op.host_out_bytes
        traffic.exec_link_bytes += op.shift_bytes + op.relayout_bytes + op.distributed_bytes
        if ideal:
            traffic.free_bytes += op.distributed_bytes
        for phase in (work.distribute, work.relayout, work.cost.shift, work.cost.reduction):
            traffic.add_phase(phase, load=False)
        for load in work.loads:
            traffic.load_link_bytes += load.delivered_bytes
            traffic.add_phase(load.network, load=True)
    return traffic


def interconnect_windows(works: Sequence[Work], slots: Sequence[Slot]) -> tuple[list, list]:
    """Busy windows ``(start, end, busy_s)`` of the links, for :func:`busy_fraction`: per
    operator its execution (its transfers' :attr:`~runtime_sim.timing.work.Work.link_busy_s`)
    and its returns to the host; per load its delivery over its interval
    (:attr:`PhaseCost.busy_s`, hop latency excluded). Returns ``(executions, loads)``."""
    execs, loads = [], []
    for work, slot in zip(works, slots):
        execs.append((slot.exec_start, slot.exec_end, work.link_busy_s))
        if slot.store_interval:
            execs.append((*slot.store_interval, sum(s.network.busy_s for s in work.stores)))
        for load in work.loads:
            interval = slot.hbm_interval if load.kind == "hbm" else slot.host_interval
            if interval:
                loads.append((*interval, load.network.busy_s))
    return execs, loads


def receive_capacity(hw: HardwareSpec, topo: Topology | None = None) -> float:
    """Bytes per second all cores of ``hw`` can receive over links at once (the denominator of
    ``interconnect_floor_s`` and, per interconnect, of ``link_bandwidth_utilization``).

    All-to-all: one port per core. Mesh: each directed link into a core node, each edge port
    of an I/O node's span on a core's router (:meth:`MeshTopology.io_ports`: the host link and
    edge controllers each have their own), at ``io_bandwidth``, and the inter-chip fabric.
    """
    topo = topo if topo is not None else make_topology(hw)
    if not isinstance(topo, MeshTopology):
        return hw.num_cores * hw.link_bandwidth
    cpc = topo.cores_per_chip
    y, x = topo.core_y[:cpc], topo.core_x[:cpc]
    links = ((x > 0) | topo.wrap_x).astype(int) + ((x < topo.cols - 1) | topo.wrap_x)
    links = links + ((y > 0) | topo.wrap_y) + ((y < topo.rows - 1) | topo.wrap_y)
    is_core = np.zeros(topo.rows * topo.cols, bool)
    is_core[y * topo.cols + x] = True
    ports = sum(int(is_core[topo.port_router[p]].sum()) for p in topo.io_ports())
    per_chip = float(links.sum()) * hw.link_bandwidth + ports * topo.io_bandwidth
    inter = hw.inter_chip_bandwidth if hw.num_chips > 1 else 0.0
    return per_chip * hw.num_chips + inter


def _out_links(topo: MeshTopology) -> np.ndarray:
    """Per controller inside the grid, how many links leave its node."""
    y, x = topo.ctrl_y, topo.ctrl_x
    out = ((x > 0) | topo.wrap_x).astype(int) + ((x < topo.cols - 1) | topo.wrap_x)
    return out + ((y > 0) | topo.wrap_y) + ((y < topo.rows - 1) | topo.wrap_y)


def _cut_links(topo: MeshTopology) -> tuple[int, int, int, int]:
    """Links crossing the middle cuts per direction, as :attr:`PhaseCost.cut_bytes` orders them."""
    c = topo.num_chips
    vertical = c * topo.rows * (2 if topo.wrap_x else 1) if topo.cols >= 2 else 0
    horizontal = c * topo.cols * (2 if topo.wrap_y else 1) if topo.rows >= 2 else 0
    return vertical, vertical, horizontal, horizontal


def resource_floors(hw: HardwareSpec, traffic: RunTraffic,
                    topo: Topology | None = None) -> dict[str, float]:
    """Every floor of a run (seconds, keys :data:`FLOOR_KEYS`; formulas in the module
    docstring): the one definition a report, a design-space sweep and the benchmarks draw.

    Parameters
    ----------
    hw : HardwareSpec
        The chip the run was timed on.
    traffic : RunTraffic
        What the run asks of each resource.
    topo : Topology, optional
        ``hw``'s network (default: :func:`~runtime_sim.machine.topology.make_topology`).

    Returns
    -------
    dict of str to float
        Each floor; 0 for a resource the chip does not have.
    """
    topo = topo if topo is not None else make_topology(hw)
    floors = dict.fromkeys(FLOOR_KEYS, 0.0)
    floors["compute_floor_s"] = traffic.flops / hw.peak_matrix_flops
    floors["compute_units_floor_s"] = traffic.unit_s
    if hw.hbm_bandwidth > 0:
        floors["hbm_floor_s"] = traffic.hbm_bytes / hw.hbm_bandwidth
    floors["host_floor_s"] = traffic.host_bytes / (hw.host_bandwidth * hw.num_chips)
    floors["interconnect_floor_s"] = traffic.received_bytes / receive_capacity(hw, topo)
    sent = traffic.hbm_sent_bytes
    if hw.hbm_injection_bandwidth > 0 and hw.hbm_controllers:
        floors["injection_floor_s"] = sent / (hw.hbm_controllers * hw.hbm_injection_bandwidth)
    if hw.num_chips > 1 and hw.inter_chip_bandwidth > 0:
        floors["inter_chip_floor_s"] = traffic.inter_bytes / hw.inter_chip_bandwidth
    if isinstance(topo, MeshTopology):
        if hw.hbm_controllers and topo.interior:
            out = float(_out_links(topo).sum())
            floors["controller_ports_floor_s"] = sent / (out * hw.link_bandwidth) if out else 0.0
        elif hw.hbm_controllers:
            # a chip without controllers reads through every chip's (their spans on its mesh)
            served = 1 + sum(topo.controllers_of_chip(k).size == 0 for k in range(hw.num_chips))
            ports = served * sum(p.size for p in topo.io_ports()[:hw.hbm_controllers])
            floors["edge_ports_floor_s"] = sent / (ports * topo.io_bandwidth) if ports else 0.0
        crossed = traffic.cut_bytes
        floors["bisection_floor_s"] = max(
            (b / (n * hw.link_bandwidth) for b, n in zip(crossed, _cut_links(topo)) if n), default=0.0)
    return floors


def run_bound(floors: dict[str, float]) -> tuple[str, float]:
    """``(run_bound_by, floor_s)``: the resource with the largest floor (the first of
    :data:`FLOOR_KEYS` on a tie) and that floor; ``("", 0.0)`` when every floor is 0."""
    key = max(FLOOR_KEYS, key=lambda k: floors.get(k, 0.0))
    value = floors.get(key, 0.0)
    return (bound_name(key), value) if value > 0 else ("", 0.0)


def busy_fraction(total_s: float, windows: Iterable[tuple[float, float, float]]) -> float:
    """The share of ``[0, total_s]`` during which a resource is busy, given windows ``(start,
    end, busy_s)``: each window keeps the resource busy ``busy_s`` of its length, spread evenly.
    Where windows overlap, their busy rates add up to at most 1 (an instant is busy or not),
    so the result lies in [0, 1] whatever the windows. A window of zero length busy for
    ``busy_s`` counts as ``[start, start + busy_s]``.
    """
    edges: list[tuple[float, float]] = []
    for start, end, busy in windows:
        if busy <= 0:
            continue
        if end <= start:
            end = start + busy
        rate = min(1.0, busy / (end - start))
        edges.append((start, rate))
        edges.append((end, -rate))
    if total_s <= 0 or not edges:
        return 0.0
    edges.sort()
    measure = rate = 0.0
    last = edges[0][0]
    for t, delta in edges:
        if t > last:
            measure += (min(t, total_s) - min(last, total_s)) * min(1.0, rate)
            last = t
        rate += delta
    return min(1.0, measure / total_s)


def time_parts(*, total_s: float, compute_s: float, transfer_s: float, unit_s: float,
               sync_s: float, link_busy_s: float, wait_s: float, contention_wait_s: float,
               last_end_s: float) -> dict[str, float]:
    """Where a run's time goes: ``total_s`` split into parts that add up to it.

    ``total_s = compute_s + transfer_s + idle``, and each is split further:

    * compute: ``compute at peak`` (``unit_s``: every operator's FLOPs at its unit's peak),
      ``sync`` (``steps x sync_cycles``, one barrier per bulk-synchronous step) and ``compute
      below peak`` (the rest: sub-tasks below their unit's peak, padding, epilogues,
      reduction adds);
    * transfer: ``link transfer`` (``link_busy_s``: bytes over bandwidth, contention
      included) and ``hop latency`` (each staged chunk's latency per hop);
    * idle: ``load wait`` (the compute array waits for an operator's off-chip loads),
      ``contention wait`` (the part of those waits caused by loads sharing links with
      executions, ``interconnect_stall_s``) and ``host return`` (after the last operator,
      outputs still going to the host).
    """
    sync = min(sync_s, compute_s)
    at_peak = min(unit_s, compute_s - sync)
    link = min(link_busy_s, transfer_s)
    contention = min(contention_wait_s, wait_s)
    return {
        "compute at peak": at_peak,
        "compute below peak": compute_s - sync - at_peak,
        "sync": sync,
        "link transfer": link,
        "hop latency": transfer_s - link,
        "load wait": wait_s - contention,
        "contention wait": contention,
        "host return": max(0.0, total_s - last_end_s),
    }


def remainder(total_s: float, floor_s: float, parts: dict[str, float]) -> dict[str, float]:
    """The report's ``remainder``: ``parts`` (:func:`time_parts`) when ``total_s`` is more than
    :data:`REMAINDER_FACTOR` times the largest floor, else empty (the floor explains the time)."""
    if total_s <= 0 or total_s <= REMAINDER_FACTOR * floor_s:
        return {}
    return dict(parts)


def shares(parts: dict[str, float], total_s: float) -> Sequence[tuple[str, float, float]]:
    """``(part, seconds, share of total_s)``, largest first, parts over 0 only."""
    rows = [(k, v, v / total_s) for k, v in parts.items() if v > 0 and total_s > 0]
    return sorted(rows, key=lambda r: -r[1])
