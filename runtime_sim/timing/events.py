"""The timeline both schedulers write: a ``heapq`` event queue and each operator's slot on it.

Elk §5 ("Simulation framework") describes an event-driven ICCA simulator; this one is
event-driven at operator and transfer granularity. :class:`Events` runs callbacks in
simulated-time order; :class:`Slot` records where one operator instance landed (its
execution, its loads or preload, its return to the host, its delays). The prefetch scheduler
(:mod:`runtime_sim.timing.prefetch_scheduler`) and the preload stream scheduler
(:mod:`runtime_sim.timing.preload_stream_scheduler`) fill the slots; :mod:`runtime_sim.timing.report_builder`
reads them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable


@dataclass
class Slot:
    exec_start: float = -1.0
    exec_end: float = -1.0
    load_start: float = 0.0
    load_end: float = 0.0
    hbm_interval: tuple[float, float] | None = None
    host_interval: tuple[float, float] | None = None
    store_interval: tuple[float, float] | None = None  # its outputs' return to the host
    contention_delay: float = 0.0
    gate_open: bool = False
    prefetched: bool = False
    loads_done: bool = False
    ended: bool = False
    # -- preload stream runs --
    preloaded: bool = False  # the stream preloads it (load_start/load_end bound the preload)
    preload_delay: float = 0.0  # its preload's own delay from sharing links with executions


class Events:
    """A ``heapq`` event queue: callbacks at simulated times, equal times in insertion order."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self.now = 0.0

    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (t, self._seq, fn))
        self._seq += 1

    def drain(self) -> None:
        """Run every event, in time order (events may schedule more)."""
        while self._heap:
            self.now, _, fn = heapq.heappop(self._heap)
            fn()

