"""The timing report of a scheduled run: per-operator timings, totals, utilization, bounds.

:func:`build_timing_report` reads the :class:`~runtime_sim.timing.work.Work` items and the slots a
scheduler (:mod:`runtime_sim.timing.prefetch_scheduler`, :mod:`runtime_sim.timing.preload_stream_scheduler`)
gave them and assembles the :class:`~runtime_sim.timing.timing_report.TimingReport`;
:func:`lower_bounds` adds what no plan can avoid on the system and flags slow operators.

Stall: a transfer phase's time beyond what its slowest flow would take alone on the network
(contention on ports, links, the inter-chip cap; distribution included), plus load delays
from sharing links that postponed an operator. Region outputs stay on chip (the next region
reads them as ``"chip"`` inputs) unless the host reads them (see ``"host"`` in
:mod:`runtime_sim.timing.work`); the run ends when the last operator and the last return to the
host have ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime_sim.contract.energy import ActionCounts, run_energy
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.hbm_reads import call_reads, run_hbm_bytes
from runtime_sim.contract.labels import region_label
from runtime_sim.contract.sram_budget import IDEAL
from runtime_sim.machine.topology_base import Topology
from runtime_sim.timing.floors import (
    busy_fraction,
    interconnect_windows,
    peak_seconds,
    receive_capacity,
    remainder,
    resource_floors,
    run_bound,
    run_traffic,
    time_parts,
)
from runtime_sim.timing.events import Slot
from runtime_sim.timing.timing_report import SLOW_FACTOR, OpTiming, TimingReport
from runtime_sim.timing.prefetch_scheduler import PrefetchSchedule
from runtime_sim.timing.preload_stream_scheduler import StreamSchedule
from runtime_sim.timing.work import Work
from schedules.actions import transfer_actions


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Disjoint sorted intervals covering the union of ``intervals``."""
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two lists of disjoint sorted intervals."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass
class _Walk:
    """What the walk over the scheduled operators gathers besides their timings: the busy
    intervals of execution, HBM and all loads, the stall sums and the prefetch peaks."""

    exec_iv: list[tuple[float, float]] = field(default_factory=list)
    hbm_iv: list[tuple[float, float]] = field(default_factory=list)
    load_iv: list[tuple[float, float]] = field(default_factory=list)
    stall_s: float = 0.0
    exposed_s: float = 0.0  # link contention that postponed an operator
    peak_prefetch: int = 0
    peak_preload: int = 0
    last_end_s: float = 0.0


def _op_timing(work: Work, slot: Slot, wait: float, exposed: float, stall: float,
               design: str | None) -> OpTiming:
    """The timing of one operator instance: its costs (``work``) where its scheduler put them
    (``slot``); ``wait`` since the previous operator ended, of which ``exposed`` was link
    contention, and its ``stall``."""
    cost = work.cost
    hbm = next((l for l in work.loads if l.kind == "hbm"), None)
    host = next((l for l in work.loads if l.kind == "host"), None)
    compute = cost.compute_s + cost.reduction_compute_s + cost.epilogue_s
    hbm_s = (slot.hbm_interval[1] - slot.hbm_interval[0]) if slot.hbm_interval else 0.0
    host_s = (slot.host_interval[1] - slot.host_interval[0]) if slot.host_interval else 0.0
    store = slot.store_interval
    host_out_s = (store[1] - store[0]) if store else 0.0
    steps_s = cost.compute_s + cost.shift.time_s
    inter = (work.relayout.inter_bytes + cost.shift.inter_bytes + cost.reduction.inter_bytes
             + work.distribute.inter_bytes)
    delivered = (work.preloaded_bytes if design is not None
                 else sum(l.delivered_bytes for l in work.loads))
    return OpTiming(
        name=work.op.name, label=work.op.display_label(), region=work.region,
        kind=work.op.expr.kind, cores=cost.cores,
        start_s=slot.exec_start, end_s=slot.exec_end, compute_s=compute,
        transfer_s=work.transfer_s, link_busy_s=work.link_busy_s, hbm_s=hbm_s,
        stall_s=stall, host_s=host_s, wait_s=wait,
        steps=cost.steps, flops=cost.flops,
        shift_bytes=cost.rotation_bytes + cost.reduction_bytes,
        rotation_bytes=cost.rotation_bytes, reduction_bytes=cost.reduction_bytes,
        relayout_bytes=work.relayout_bytes, inter_chip_bytes=inter,
        hbm_bytes=sum(work.hbm_tensors.values()),
        hbm_delivered_bytes=hbm.unique_bytes if hbm else 0.0,
        host_in_bytes=host.unique_bytes if host else 0.0,
        host_out_bytes=sum(s.unique_bytes for s in work.stores),
        host_out_s=host_out_s, host_out_start_s=store[0] if store else 0.0,
        load_start_s=slot.load_start if work.loads else 0.0,
        load_end_s=slot.load_end if work.loads else 0.0,
        hbm_start_s=slot.hbm_interval[0] if slot.hbm_interval else 0.0,
        host_start_s=slot.host_interval[0] if slot.host_interval else 0.0,
        prefetched=bool(work.loads) and slot.prefetched,
        chips=work.chips,
        sram_bytes_per_core=int(work.used.max()),
        relayout_s=work.relayout.time_s, steps_s=steps_s, shift_s=cost.shift.time_s,
        reduction_s=cost.reduction.time_s + cost.reduction_compute_s,
        epilogue_s=cost.epilogue_s, distinct_shift_phases=cost.distinct_shift_phases,
        estimated=work.relayout_estimated or cost.shift_sampled,
        preloaded=slot.preloaded,
        preload_start_s=slot.load_start if slot.preloaded else 0.0,
        preload_end_s=slot.load_end if slot.preloaded else 0.0,
        preload_stall_s=slot.preload_delay if slot.preloaded else slot.contention_delay,
        interconnect_stall_s=exposed, distribute_s=work.distribute.time_s,
        distributed_bytes=work.distributed_bytes,
        preloaded_bytes=delivered,
        load_bound_by=(max(work.loads, key=lambda l: l.duration_s).bound_by
                       if work.loads else ""),
        preload_space_bytes_per_core=(int(work.preload_space.max())
                                      if work.preload_space is not None else 0),
        actions=_op_actions(work, delivered),
    )


def _op_actions(work: Work, delivered: float) -> ActionCounts:
    """The actions of one operator instance that cost energy (:mod:`schedules.actions`): its
    steps, epilogue and reduction adds (:attr:`OpCost.actions`), and its transfers: the bytes
    it moves between cores, the bytes its loads deliver and its returns to the host send; the
    byte-hops of every phase it runs on the network (:attr:`PhaseCost.byte_hops`: per link a
    byte crossed on a mesh, per byte through the exchange), loads and returns included."""
    cost = work.cost
    io = [l.network for l in work.loads] + [s.network for s in work.stores]
    phases = [work.distribute, work.relayout, cost.shift, cost.reduction, *io]
    hbm = sum(l.unique_bytes for l in work.loads if l.kind == "hbm")
    host = sum(l.unique_bytes for l in work.loads if l.kind == "host") + sum(
        s.unique_bytes for s in work.stores)
    moved = work.relayout_bytes + cost.rotation_bytes + cost.reduction_bytes + work.distributed_bytes
    return cost.actions + transfer_actions(
        moved_bytes=moved, delivered_bytes=delivered,
        returned_bytes=sum(s.unique_bytes for s in work.stores),
        link_byte_hops=sum(p.byte_hops for p in phases),
        inter_chip_bytes=sum(p.inter_bytes for p in phases), hbm_bytes=hbm, host_bytes=host)


def _walk_operators(works: list[Work], slots: list[Slot], peak: int,
                    design: str | None) -> tuple[list[OpTiming], _Walk]:
    """Every operator's timing, in schedule order, and what the run's totals need of them."""
    per_op: list[OpTiming] = []
    walk = _Walk(peak_prefetch=peak)
    for i, (work, slot) in enumerate(zip(works, slots)):
        cost = work.cost
        wait = max(0.0, slot.exec_start - walk.last_end_s)
        # contention that postponed this operator: only the part of the load's delay that
        # ran past the previous operator's end
        exposed = min(slot.contention_delay, wait)
        stall = (work.distribute.stall_s + work.relayout.stall_s + cost.shift.stall_s
                 + cost.reduction.stall_s + exposed)
        walk.stall_s += stall
        walk.exposed_s += exposed
        if slot.prefetched and i and design is None:
            walk.peak_prefetch = max(walk.peak_prefetch,
                                     int((works[i - 1].used + work.prefetch_need).max()))
            walk.peak_preload = max(walk.peak_preload, int(work.prefetch_need.max()))
        per_op.append(_op_timing(work, slot, wait, exposed, stall, design))
        walk.exec_iv.append((slot.exec_start, slot.exec_end))
        if slot.hbm_interval:
            walk.hbm_iv.append(slot.hbm_interval)
        for iv in (slot.hbm_interval, slot.host_interval):
            if iv and iv[1] > iv[0]:
                walk.load_iv.append(iv)
        walk.last_end_s = slot.exec_end
    return per_op, walk


def _region_calls(works: list[Work], slots: list[Slot]) -> list[dict[str, Any]]:
    """One entry per region call, in run order: its generated name and displayed label, its
    span on the timeline and its operator count."""
    regions: list[dict[str, Any]] = []
    for work, slot in zip(works, slots):
        if not regions or regions[-1]["program"] != work.program:
            regions.append({"name": work.region, "program": work.program,
                            "start_s": slot.exec_start, "end_s": slot.exec_end, "num_ops": 0,
                            "op_labels": []})
        regions[-1]["end_s"] = slot.exec_end
        regions[-1]["num_ops"] += 1
        regions[-1]["op_labels"].append(work.op.label or work.op.expr.kind)
    for index, region in enumerate(regions):
        # the displayed name of a region call; "name" stays the generated region symbol
        region["label"] = region_label(region.pop("op_labels"), index)
    return regions


def _distinct_hbm_bytes(works: list[Work]) -> float:
    """Bytes of distinct HBM reads of the run (:func:`runtime_sim.contract.hbm_reads.run_hbm_bytes`):
    a tensor read by several operators of one region call (or by each chip) counts once; the
    same name in two calls is two reads."""
    calls: dict[int, list[dict[str, float]]] = {}
    for work in works:
        calls.setdefault(work.program, []).append(work.hbm_tensors)
    return run_hbm_bytes(call_reads(reads) for reads in calls.values())


def _load_cuts(works: list[Work]) -> dict[str, float]:
    """Per cut that bounds a load (:attr:`~runtime_sim.machine.phase_cost.PhaseCost.bound_by`),
    the seconds of load time it bounds."""
    load_cuts: dict[str, float] = {}
    for work in works:
        for load in work.loads:
            if load.duration_s > 0:
                load_cuts[load.bound_by] = load_cuts.get(load.bound_by, 0.0) + load.duration_s
    return load_cuts


def _run_metrics(works: list[Work], schedule: PrefetchSchedule | StreamSchedule, hw: HardwareSpec,
                 topo: Topology, design: str | None, per_op: list[OpTiming], walk: _Walk,
                 total: float, compute: float, transfer: float, hbm_bytes: float,
                 peak_preload: int) -> dict[str, Any]:
    """The run-level metrics of the report beside its sums: preload/execute overlap,
    utilizations, the resource floors and what bounds the run (:mod:`runtime_sim.timing.floors`),
    and what bounds its loads."""
    loading = _union(walk.load_iv)
    busy_exec = _union([iv for iv in walk.exec_iv if iv[1] > iv[0]])
    preload_s = sum(e - s for s, e in loading)
    preload_overlap = _intersection(loading, busy_exec)
    exec_s = sum(e - s for s, e in busy_exec)
    flops = sum(o.flops for o in per_op)
    moved = sum(o.shift_bytes + o.relayout_bytes for o in per_op) + sum(
        l.delivered_bytes for w in works for l in w.loads) + sum(w.distributed_bytes for w in works)
    flops_utilization = flops / (total * hw.peak_matrix_flops) if total > 0 else 0.0
    ideal = design == IDEAL
    traffic = run_traffic(works, per_op, hbm_bytes, hw, ideal)
    floors = resource_floors(hw, traffic, topo)
    bound_by, floor_s = run_bound(floors)
    # bytes received by cores over links that cost time, against every core receiving at
    # full rate on every link it has, on each interconnect (two for the ideal design)
    networks = 2 if ideal else 1
    link_bandwidth_utilization = ((traffic.exec_link_bytes - traffic.free_bytes + traffic.load_link_bytes)
                                  / (total * receive_capacity(hw, topo) * networks)
                                  if total > 0 else 0.0)
    # distinct bytes only: a copy read twice (once per chip) is not useful bandwidth
    hbm_utilization = (hbm_bytes / (total * hw.hbm_bandwidth)
                       if total > 0 and hw.hbm_bandwidth > 0 else 0.0)
    # links holding bandwidth (hop latency excluded), each instant counted once per
    # interconnect: the preloads have their own on the ideal design
    exec_windows, load_windows = interconnect_windows(works, schedule.slots)
    if ideal:
        link_busy = (busy_fraction(total, exec_windows) + busy_fraction(total, load_windows)) / 2
    else:
        link_busy = busy_fraction(total, exec_windows + load_windows)
    parts = time_parts(
        total_s=total, compute_s=compute, transfer_s=transfer, unit_s=traffic.unit_s,
        sync_s=sum(o.steps for o in per_op) * hw.sync_cycles / hw.clock_hz,
        link_busy_s=sum(o.link_busy_s for o in per_op), wait_s=sum(o.wait_s for o in per_op),
        contention_wait_s=walk.exposed_s, last_end_s=walk.last_end_s)
    load_cuts = _load_cuts(works)
    return {
        "design": design or "", "preload_s": preload_s,
        "preload_only_s": preload_s - preload_overlap, "execute_only_s": exec_s - preload_overlap,
        "preload_overlap_s": preload_overlap, "interconnect_stall_s": walk.exposed_s,
        "preload_stall_s": sum(o.preload_stall_s for o in per_op),
        "hbm_utilization": hbm_utilization,
        "interconnect_utilization": link_busy,
        "flops_utilization": flops_utilization,
        "link_bandwidth_utilization": link_bandwidth_utilization,
        "achieved_flops": flops / total if total > 0 else 0.0,
        "preloaded_bytes": sum(o.preloaded_bytes for o in per_op),
        "distributed_bytes": sum(o.distributed_bytes for o in per_op),
        "preloads": len(schedule.pre) if design is not None else 0,
        "executes": len(per_op) if design is not None else 0,
        "peak_preload_bytes_per_core": peak_preload,
        "link_bytes": moved,
        **floors, "run_bound_by": bound_by, "floor_s": floor_s,
        "remainder": remainder(total, floor_s, parts),
        "load_bound_s": load_cuts,
        "load_bound_by": max(load_cuts, key=load_cuts.get) if load_cuts else "",
    }


def build_timing_report(works: list[Work], schedule: PrefetchSchedule | StreamSchedule,
                        hw: HardwareSpec, topo: Topology, peak: int, num_programs: int, design: str | None = None) -> TimingReport:
    """The report of a run: ``works`` as ``schedule`` placed them (after ``schedule.run()``).

    ``peak`` is the peak SRAM per core of the device accounting
    (:meth:`~runtime_sim.timing.work.WorkBuilder.program_work`), ``design`` the preload design
    of a stream run (``None`` without a stream; the stream's SRAM timeline then gives the
    peaks)."""
    per_op, walk = _walk_operators(works, schedule.slots, peak, design)
    store_ends = [s.store_interval[1] for s in schedule.slots if s.store_interval]
    total = max([e for _, e in walk.exec_iv] + store_ends, default=0.0)
    compute = sum(o.compute_s for o in per_op)
    transfer = sum(o.transfer_s for o in per_op)
    hbm_s = sum(e - s for s, e in walk.hbm_iv)
    if design is not None:  # preloads are issued in their own order
        walk.hbm_iv.sort()
    overlap = _intersection(walk.hbm_iv, walk.exec_iv)
    hbm_bytes = _distinct_hbm_bytes(works)
    peak_prefetch, peak_preload = walk.peak_prefetch, walk.peak_preload
    if design is not None:  # the SRAM timeline (the ideal design: execution space alone)
        peak = peak_prefetch = schedule.peak
        peak_preload = schedule.peak_preload
    metrics = _run_metrics(works, schedule, hw, topo, design, per_op, walk, total, compute,
                           transfer, hbm_bytes, peak_preload)
    bounds = lower_bounds(per_op, hw, [work.op.expr for work in works])
    actions = sum((o.actions for o in per_op), ActionCounts())
    return TimingReport(
        hardware=hw.name, topology=topo.kind if hw.num_chips == 1 else f"{topo.kind} x{hw.num_chips} chips",
        total_s=total, compute_s=compute, transfer_s=transfer, hbm_s=hbm_s, overlap_s=overlap,
        stall_s=walk.stall_s, host_s=sum(o.host_s + o.host_out_s for o in per_op),
        idle_s=max(0.0, total - compute - transfer), num_ops=len(per_op), num_regions=num_programs,
        hbm_bytes=hbm_bytes, hbm_delivered_bytes=sum(o.hbm_delivered_bytes for o in per_op),
        host_in_bytes=sum(o.host_in_bytes for o in per_op),
        host_out_bytes=sum(o.host_out_bytes for o in per_op),
        shift_bytes=sum(o.shift_bytes for o in per_op),
        rotation_bytes=sum(o.rotation_bytes for o in per_op),
        reduction_bytes=sum(o.reduction_bytes for o in per_op),
        relayout_bytes=sum(o.relayout_bytes for o in per_op),
        inter_chip_bytes=sum(o.inter_chip_bytes for o in per_op),
        steps=sum(o.steps for o in per_op), peak_sram_bytes_per_core=peak,
        peak_sram_with_prefetch_bytes_per_core=peak_prefetch, flops=sum(o.flops for o in per_op),
        per_op=per_op, regions=_region_calls(works, schedule.slots), hw=hw, **bounds, **metrics,
        actions=actions, energy=run_energy(actions, hw.energy_table(), total, cores=hw.num_cores,
                                           chips=hw.num_chips),
    )


def lower_bounds(per_op: list[OpTiming], hw: HardwareSpec, exprs: list[TensorExpr]) -> dict[str, Any]:
    """Fill every operator's :attr:`OpTiming.lower_bound_s` and name the operators and kinds
    whose time is more than :data:`SLOW_FACTOR` times their lower bound.

    An operator's time is what it costs the compute array: its execution plus the wait for its
    loads (``wait_s + duration_s``; these add up to the makespan, minus the last return to the
    host). Its lower bound is the largest of what no plan can avoid on this system:

    * ``flops``: its FLOPs on every core of the system at the peak of the unit that runs it
      (matrix unit for sums of products, vector unit otherwise, ``schedules`` templates) at
      the rate of its dtype (``exprs``: each operator's expression,
      :func:`runtime_sim.timing.floors.peak_seconds`);
    * ``hbm``: its distinct HBM bytes at the full HBM bandwidth;
    * ``host``: its host bytes, both directions, over all chips' host links;
    * ``sync``: one bulk-synchronous step, ``sync_cycles`` (every operator runs at least one).
    """
    kinds: dict[str, dict[str, Any]] = {}
    slow_ops = []
    for op, expr in zip(per_op, exprs):
        terms = {
            "flops": peak_seconds(op.flops, expr, hw),
            "hbm": op.hbm_bytes / hw.hbm_bandwidth if hw.hbm_bandwidth > 0 else 0.0,
            "host": (op.host_in_bytes + op.host_out_bytes) / (hw.host_bandwidth * hw.num_chips),
            "sync": hw.sync_cycles / hw.clock_hz,
        }
        op.bound_by = max(terms, key=terms.get)
        op.lower_bound_s = terms[op.bound_by]
        spent = op.wait_s + op.duration_s
        # grouped by what the user calls the operator (its label's anchor: max_pool2d, not
        # the device template "reduce"), else by its device kind
        group = op.label.split(" [")[0].split("+")[0] if op.label else op.kind
        row = kinds.setdefault(group, {"kind": group, "num_ops": 0, "time_s": 0.0,
                                       "lower_bound_s": 0.0})
        row["num_ops"] += 1
        row["time_s"] += spent
        row["lower_bound_s"] += op.lower_bound_s
        if op.lower_bound_s > 0 and spent > SLOW_FACTOR * op.lower_bound_s:
            slow_ops.append({"name": op.name, "label": op.label, "region": op.region, "kind": op.kind,
                             "start_s": op.start_s, "time_s": spent, "lower_bound_s": op.lower_bound_s,
                             "bound_by": op.bound_by, "ratio": spent / op.lower_bound_s})
    for row in kinds.values():
        row["ratio"] = row["time_s"] / row["lower_bound_s"] if row["lower_bound_s"] > 0 else 0.0
    op_kinds = sorted(kinds.values(), key=lambda r: -r["time_s"])
    slow_ops.sort(key=lambda r: -(r["time_s"] - r["lower_bound_s"]))
    return {"op_kinds": op_kinds, "slow_kinds": [r for r in op_kinds if r["ratio"] > SLOW_FACTOR],
            "slow_ops": slow_ops}
