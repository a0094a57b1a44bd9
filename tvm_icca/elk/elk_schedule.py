"""An Elk schedule and its forward estimate (Elk §4.2, §4.5).

An :class:`ElkSchedule` says, per operator, its execute-state point and preload-state point,
the preload order and how far ahead each preload is issued; :func:`estimate` prices it the way
the device runs the stream (:func:`runtime_sim.machine.stream_timing.stream_times`): each
operator's execution is its own distribution phase plus its execute point's time and keeps
priority on the links; a preload's network delivery gets the link share the running execution
leaves. Every design of :mod:`tvm_icca.elk.designs` is ranked by this estimate.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from runtime_sim.machine.stream_timing import stream_times
from tvm_icca.elk.inductive import (
    check_horizons,
    early_members,
    min_horizons,
)
from tvm_icca.elk.overlap_model import window_bytes
from tvm_icca.elk.tradeoffs import ElkMachine, OpTradeoffs


@dataclass(frozen=True)
class Timeline:
    """Estimated per-op times (seconds); preload times are NaN for ops that load nothing."""

    pre_start: tuple[float, ...]
    pre_end: tuple[float, ...]
    exec_start: tuple[float, ...]
    exec_end: tuple[float, ...]
    exec_s: tuple[float, ...]       # durations used (window time incl. own distribution)
    preload_s: tuple[float, ...]
    window_bytes: tuple[int, ...]   # SRAM per core before and while each op executes (overlap_model)
    total_s: float


@dataclass(frozen=True)
class PlanStats:
    """How the schedule was found: orders tried, displacement of the chosen order, wall time."""

    orders_tried: int = 1
    avg_displacement: float = 0.0       # group slots moved, averaged over the layer's groups
    avg_position_displacement: float = 0.0  # preload positions moved, over all preloading ops
    planning_s: float = 0.0
    source: str = ""                    # which candidate won (e.g. "inductive", "static", "basic")


@dataclass(frozen=True)
class ElkSchedule:
    """A plan for the device stream: per op its execute point and preload point (index into
    ``preloads[exec_choice[i]]``, -1 if it loads nothing), the preload order, and ``horizon[i]``
    = preloads issued before ``execute(i)``; plus its estimate."""

    design: str
    exec_choice: tuple[int, ...]
    preload_choice: tuple[int, ...]
    preload_order: tuple[int, ...]
    horizon: tuple[int, ...]
    timeline: Timeline
    total_s: float
    stats: PlanStats


# ----------------------------------------------------------------------------------- estimate


def ideal_load_s(op: OpTradeoffs) -> float:
    """Ideal's load time: the shortest of any preload point (Elk §6.1 roofline). Its preload
    space is the chosen point's (the chunks its program carries), not the smallest of all
    points: that is what the device holds."""
    return min(p.load_s for front in op.preloads for p in front)


def estimate(ops: Sequence[OpTradeoffs], machine: ElkMachine, schedule: ElkSchedule,
             stop_at: float = math.inf, parts: WindowParts | None = None) -> Timeline | None:
    """Forward (earliest-start) evaluation of a schedule under the memory/contention model.

    Raises ValueError if the schedule is invalid or some window exceeds SRAM. ``stop_at``: a
    search that keeps only schedules faster than this gets ``None`` once the total is proven
    not to be (:func:`runtime_sim.machine.stream_timing.stream_times`). ``parts``: the
    schedule's :func:`window_parts`, if the caller has them (the same points and order)."""
    n = len(ops)
    order = schedule.preload_order
    m, _ = order_structure(n, tuple(order))
    check_horizons(n, order, schedule.horizon, m)
    ideal = schedule.design == "ideal"
    pts = {}
    for j in order:
        if not ops[j].loads or schedule.preload_choice[j] < 0:
            raise ValueError(f"operator {j} is in the preload order but has no preload point")
        pts[j] = ops[j].preloads[schedule.exec_choice[j]][schedule.preload_choice[j]]
    # the space of the chosen points, as the device holds them; Ideal's loads take the
    # shortest of any point (a roofline time, never a memory figure)
    if parts is None:
        parts = window_parts(ops, order, schedule.exec_choice, schedule.preload_choice)
    load_s = {j: ideal_load_s(ops[j]) if ideal else pts[j].load_s for j in order}
    pos = parts.pos
    points = [op.execs[e] for op, e in zip(ops, schedule.exec_choice)]
    ep_space, live, waiting, own = parts.exec_space, parts.live, parts.waiting, parts.own
    # each window's preloads (overlap_model.window_bytes): positions m[i] .. h[i] - 1, and
    # the early members
    w_space = (parts.prefix[np.array(schedule.horizon, dtype=np.int64)] - parts.prefix[parts.m]
               + parts.ahead)
    ep_time = [ep.time_s for ep in points]
    ep_traffic = [ep.traffic_s for ep in points]
    if ideal:
        # the preload SRAM holds i's own preload until i starts, beside its window; the
        # execution SRAM what the device holds before i starts, then i's execution
        exec_side = np.maximum(ep_space + live, waiting)
        over = np.flatnonzero((exec_side > machine.sram_bytes)
                              | (w_space + own > machine.preload_capacity))
        if over.size:
            raise ValueError(f"ideal: operator {int(over[0])} exceeds SRAM")
        exec_s, busy_s = ep_time, ep_traffic
        wbytes = exec_side.tolist()
    else:
        total = window_bytes(ep_space, (w_space,), live, waiting, own)
        over = np.flatnonzero(total > machine.sram_bytes)
        if over.size:
            i = int(over[0])
            raise ValueError(f"operator {i}: window needs {int(total[i])} B > {machine.sram_bytes} B")
        # the distribution phase is link traffic too
        own_s = [pts[i].distribute_s if i in pts else 0.0 for i in range(n)]
        exec_s = [d + t for d, t in zip(own_s, ep_time)]
        busy_s = [d + t for d, t in zip(own_s, ep_traffic)]
        wbytes = total.tolist()
    network_s = {j: 0.0 if ideal else pts[j].network_s for j in order}
    t = stream_times(order, schedule.horizon, exec_s, busy_s, load_s, network_s,
                     separate_interconnect=ideal or machine.separate_interconnect, stop_at=stop_at)
    if t is None:
        return None
    nan = math.nan
    pre_start = tuple(t.pre_start[pos[j]] if j in pos else nan for j in range(n))
    pre_end = tuple(t.pre_end[pos[j]] if j in pos else nan for j in range(n))
    # what each preload took on this timeline (contention included)
    pre_s = tuple(pre_end[j] - pre_start[j] if j in pos else 0.0 for j in range(n))
    return Timeline(pre_start, pre_end, t.exec_start, t.exec_end, tuple(exec_s), pre_s,
                    tuple(wbytes), t.total_s)


@functools.lru_cache(maxsize=8)
def order_structure(n: int, order: tuple[int, ...]) -> tuple[list[int], list[tuple[int, ...]]]:
    """``min_horizons`` and ``early_members`` of an order (cached: the refinement evaluates
    hundreds of schedules on one order)."""
    m = min_horizons(n, order)
    return m, early_members(n, order, m)


@dataclass(frozen=True)
class WindowParts:
    """What the memory model (:mod:`tvm_icca.elk.overlap_model`) reads of a schedule's points
    and preload order, per operator on int64 arrays: both :func:`estimate` and
    :func:`tvm_icca.elk.draft.fitting_horizons` price every window from these, so a window's
    bytes are ``side_bytes(exec_space, live, waiting, own)`` plus ``ahead`` plus the preload
    spaces of its positions ``m[i] .. horizon[i] - 1`` (``prefix[horizon] - prefix[m]``)."""

    space: list[int]            # preload space of each position of the order
    pos: dict[int, int]         # operator -> its position in the order
    prefix: np.ndarray          # prefix sums of ``space`` (K + 1 entries)
    m: np.ndarray               # min_horizons of the order
    exec_space: np.ndarray      # space of each operator's execute point
    live: np.ndarray            # OpTradeoffs.live_bytes
    waiting: np.ndarray         # OpTradeoffs.waiting_bytes
    own: np.ndarray             # each operator's own preload space (0 if it loads nothing)
    ahead: np.ndarray           # the spaces of its early members (inductive.early_members)


def window_parts(ops: Sequence[OpTradeoffs], order: Sequence[int], exec_choice: Sequence[int],
                 preload_choice: Sequence[int]) -> WindowParts:
    """:class:`WindowParts` of these points and order: computed on arrays once per schedule
    rather than one :func:`~tvm_icca.elk.overlap_model.window_bytes` call per operator (the
    Elk searches price thousands of schedules of a few hundred operators each)."""
    n = len(ops)
    m, early = order_structure(n, tuple(order))
    space = [ops[j].preloads[exec_choice[j]][preload_choice[j]].space for j in order]
    pos = {j: k for k, j in enumerate(order)}
    own = np.zeros(n, dtype=np.int64)
    if order:
        own[np.fromiter(order, dtype=np.int64, count=len(order))] = space
    ahead = np.zeros(n, dtype=np.int64)
    for i, members in enumerate(early):
        if members:     # most operators have none
            ahead[i] = sum(space[pos[j]] for j in members)
    return WindowParts(
        space, pos, np.array(prefix_sums(space), dtype=np.int64), np.array(m, dtype=np.int64),
        np.fromiter((op.execs[e].space for op, e in zip(ops, exec_choice)), np.int64, n),
        np.fromiter((op.live_bytes for op in ops), np.int64, n),
        np.fromiter((op.waiting_bytes for op in ops), np.int64, n), own, ahead)


def prefix_sums(xs: Sequence[float]) -> list:
    out = [0]
    for x in xs:
        out.append(out[-1] + x)
    return out
