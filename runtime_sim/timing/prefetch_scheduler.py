"""The prefetch scheduler: a run without a preload stream (the pre-Elk behaviour) on the timeline.

:class:`PrefetchSchedule` orders operator executions on the compute array and loads on the
HBM controllers and host links with a small event queue (:class:`~runtime_sim.timing.events.Events`).

Prefetch policy (runs without a preload stream, the pre-Elk behaviour): loads of operator
``i+1`` start when operator ``i`` starts executing if the SRAM it leaves free on every core
holds them, else when it ends; loads are served in operator order. While a load overlaps an
execution, its network delivery only gets the link time the execution leaves free (the
running operator keeps priority); the delay is counted as stall when it postpones the next
operator. Operators execute in program order, each once its loads are done and the previous
one ended.

Returns to the host (region outputs the host reads) go over the host links when their
producer ends, in order with the host loads (:mod:`runtime_sim.timing.work`, ``"host"``).
"""

from __future__ import annotations

import numpy as np

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.machine.stream_timing import preload_link_share
from runtime_sim.timing.events import Events, Slot
from runtime_sim.timing.work import Load, Work


class PrefetchSchedule(Events):
    """Operators on the compute array, loads on the HBM and host resources (``heapq`` events)."""

    def __init__(self, works: list[Work], hw: HardwareSpec):
        super().__init__()
        self.works = works
        self.hw = hw
        self.slots = [Slot() for _ in works]
        self.free = {"hbm": 0.0, "host": 0.0}

    def run(self) -> None:
        if not self.works:
            return
        self.at(0.0, lambda: self._open_gate(0))
        self.drain()

    # a load may start once its gate opens (policy) and its resource is free
    def _open_gate(self, i: int) -> None:
        slot = self.slots[i]
        if slot.gate_open:
            return
        slot.gate_open = True
        prev = self.slots[i - 1] if i else None
        # opened while the previous operator executes (rather than after it): a prefetch
        slot.prefetched = prev is not None and prev.exec_start >= 0 and self.now < prev.exec_end
        end = self.now
        slot.load_start = self.now
        for load in self.works[i].loads:
            start = max(self.now, self.free[load.kind])
            finish, delay = self._load_finish(i, load, start)
            self.free[load.kind] = finish
            interval = (start, finish)
            if load.kind == "hbm":
                slot.hbm_interval = interval
            else:
                slot.host_interval = interval
            slot.contention_delay = max(slot.contention_delay, delay)
            end = max(end, finish)
        slot.load_end = end
        self.at(end, lambda: self._loads_done(i))

    def _load_finish(self, i: int, load: Load, start: float) -> tuple[float, float]:
        """When a load started at ``start`` ends, and its delay from sharing links with the
        operator executing meanwhile (which keeps priority on the links)."""
        alone = start + load.duration_s
        if i == 0:
            return alone, 0.0
        prev = self.slots[i - 1]
        work = self.works[i - 1]
        s, e = prev.exec_start, prev.exec_end
        net = load.network.time_s
        if prev.ended or s < 0 or start >= e or net <= 0 or work.duration_s <= 0:
            return alone, 0.0
        free_rate = preload_link_share(work.link_busy_s, work.duration_s)
        window = (e - start) * free_rate
        if free_rate > 0 and net <= window:
            net_end = start + net / free_rate
        else:
            net_end = e + (net - window)
        finish = max(start + load.source_s, net_end)
        return finish, max(0.0, finish - alone)

    def _loads_done(self, i: int) -> None:
        self.slots[i].loads_done = True
        self._try_exec(i)

    def _try_exec(self, i: int) -> None:
        slot = self.slots[i]
        if slot.exec_start >= 0 or not slot.loads_done:
            return
        if i and not self.slots[i - 1].ended:
            return  # the previous operator still runs; its end retries this one
        slot.exec_start = self.now
        slot.exec_end = self.now + self.works[i].duration_s
        self.at(self.now, lambda: self._exec_started(i))
        self.at(slot.exec_end, lambda: self._exec_ended(i))

    def _exec_started(self, i: int) -> None:
        if i + 1 < len(self.works) and self._fits_beside(i, i + 1) and not (
                self.works[i].stores and any(l.kind == "host" for l in self.works[i + 1].loads)):
            # (host inputs after a return to the host may be computed from it: they wait)
            self._open_gate(i + 1)

    def _exec_ended(self, i: int) -> None:
        self.slots[i].ended = True
        stores = self.works[i].stores
        if stores:  # the host reads its output: chip -> host on the host links, in order
            start = max(self.now, self.free["host"])
            finish = start + sum(s.duration_s for s in stores)
            self.free["host"] = finish
            self.slots[i].store_interval = (start, finish)
        if i + 1 < len(self.works):
            self._open_gate(i + 1)
            self._try_exec(i + 1)

    def _fits_beside(self, i: int, j: int) -> bool:
        """Whether operator ``j``'s loaded partitions fit in the SRAM operator ``i`` leaves."""
        need = self.works[j].prefetch_need
        if not need.any():
            return True
        free = self.hw.sram_bytes_per_core - self.works[i].used
        return bool(np.all(need <= free))

