"""From chosen points to an estimated schedule (Elk §4.2, §4.5).

Every design of :mod:`tvm_icca.elk.designs` first chooses, per operator, an execute-state point
and a preload-state point, a preload order and horizons: a :class:`Draft`. :func:`finish_draft`
turns a draft into an :class:`~tvm_icca.elk.elk_schedule.ElkSchedule` priced by
:func:`~tvm_icca.elk.elk_schedule.estimate`. For fixed points and order, :func:`fitting_horizons`
gives the best horizons (every preload issued as early as SRAM allows) and
:func:`schedule_at_points` the schedule they make -- what the refinement
(:mod:`tvm_icca.elk.refine`) and the reordering of Elk-Full evaluate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from tvm_icca.elk.inductive import InfeasibleError
from tvm_icca.elk.overlap_model import window_bytes
from tvm_icca.elk.elk_schedule import (
    ElkSchedule,
    PlanStats,
    Timeline,
    WindowParts,
    estimate,
    window_parts,
)
from tvm_icca.elk.tradeoffs import ElkMachine, OpTradeoffs

#: Told of every candidate schedule estimated, with the stage of the search that made it (or
#: None): how the planner shows a long search's progress (:mod:`tvm_icca.progress`).
OnStep = Optional[Callable[[Optional[str]], None]]


@dataclass
class Draft:
    """A schedule before estimation (mutable only inside one planning call)."""

    exec_choice: list[int]
    preload_choice: list[int]
    order: tuple[int, ...]
    horizon: list[int]
    source: str


def finish_draft(ops: Sequence[OpTradeoffs], machine: ElkMachine, design: str, draft: Draft,
                 stats: PlanStats, on_step: OnStep = None,
                 stop_at: float = math.inf, parts: WindowParts | None = None
                 ) -> ElkSchedule | None:
    """``draft`` as design ``design``'s schedule, with its estimated timeline and total (raises
    ``ValueError`` if the draft's horizons are invalid or a window overflows SRAM); then
    ``on_step(None)``. ``None`` when its total is proven to be at least ``stop_at`` (a search
    that keeps only faster schedules, :func:`~tvm_icca.elk.elk_schedule.estimate`). ``parts``:
    the draft's :func:`~tvm_icca.elk.elk_schedule.window_parts`, if the caller has them."""
    sched = ElkSchedule(design, tuple(draft.exec_choice), tuple(draft.preload_choice), draft.order,
                        tuple(draft.horizon), Timeline((), (), (), (), (), (), (), 0.0), 0.0,
                        replace(stats, source=draft.source))
    try:
        tl = estimate(ops, machine, sched, stop_at, parts)
    finally:
        if on_step is not None:
            on_step(None)
    return None if tl is None else replace(sched, timeline=tl, total_s=tl.total_s)


def fitting_horizons(ops: Sequence[OpTradeoffs], machine: ElkMachine, order: Sequence[int],
                     exec_choice: Sequence[int], preload_choice: Sequence[int],
                     parts: WindowParts | None = None) -> list[int] | None:
    """The largest valid horizons whose windows fit SRAM with these execute and preload
    points (None if some operator's window does not fit even with no preload ahead).

    For fixed points they are the best horizons: under the device's rules (Elk §4.5,
    :func:`runtime_sim.machine.stream_timing.stream_times`) a preload issued earlier starts no
    later, its delivery progresses at the same share at every instant, so it ends no later, and
    an execute waits only for its own preload; so every start is monotone in the horizons.
    ``parts``: these points' :func:`~tvm_icca.elk.elk_schedule.window_parts`, if known."""
    if parts is None:
        parts = window_parts(ops, order, exec_choice, preload_choice)
    pre, m_arr = parts.prefix, parts.m
    # each window (overlap_model.window_bytes) before any preload ahead of it, its own
    # preload waiting beside what the device holds before it starts
    used = window_bytes(parts.exec_space, (parts.ahead,), parts.live, parts.waiting, parts.own)
    room = machine.sram_bytes - used
    if (room < 0).any():
        return None
    # the most preloads each window holds from its first, then no more than the next
    # operator's (horizons never decrease): a suffix minimum, capped at the order's length
    most = np.searchsorted(pre, pre[m_arr] + room, side="right") - 1
    hz = np.minimum.accumulate(np.minimum(most, len(order))[::-1])[::-1]
    if (hz < m_arr).any():
        return None
    return hz.tolist()


def schedule_at_points(ops: Sequence[OpTradeoffs], machine: ElkMachine, design: str,
                       order: Sequence[int], exec_choice: Sequence[int],
                       preload_choice: Sequence[int], source: str,
                       stats: PlanStats, on_step: OnStep = None,
                       stop_at: float = math.inf) -> ElkSchedule | None:
    """The schedule with these points and order, every preload issued as early as memory
    allows (:func:`fitting_horizons`), estimated; None if it does not fit (or, with
    ``stop_at``, if its total is proven to be at least that: :func:`finish_draft`)."""
    # the horizons and the estimate read the same window parts: computed once
    parts = window_parts(ops, order, exec_choice, preload_choice)
    hz = fitting_horizons(ops, machine, order, exec_choice, preload_choice, parts)
    if hz is None:
        return None
    try:
        return finish_draft(ops, machine, design,
                            Draft(list(exec_choice), list(preload_choice), order, hz, source),
                            stats, on_step, stop_at, parts)
    except (InfeasibleError, ValueError):
        return None
