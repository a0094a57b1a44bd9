"""The preload/execute stream scheduler (Elk §4.5): a run's instruction stream on the timeline.

Preload stream (runs whose programs carry a
:class:`~runtime_sim.contract.program.PreloadSchedule`, Elk §2.2/§4.5): the run's instructions
(:func:`runtime_sim.contract.stream.run_stream`, which refuses an invalid stream with
:class:`DeviceProgramError`) replace the prefetch policy (:mod:`runtime_sim.timing.prefetch_scheduler`):

* ``preload(i)`` delivers operator ``i``'s off-chip inputs (HBM and host,
  :func:`~runtime_sim.contract.stream.offchip_inputs`) in their preload state, input ``t`` cut into
  ``s = op.chunks_of(t)`` chunks (:mod:`runtime_sim.contract.preload_chunks`): each chip reads the distinct
  bytes of the chunks its cores hold once (HBM controllers as for a load,
  :mod:`runtime_sim.timing.work`; host inputs over the host links), and the network multicasts
  each chunk to its delivery group
  (:func:`~runtime_sim.contract.preload_chunks.delivery_groups`), every core receiving
  :func:`~runtime_sim.contract.preload_chunks.delivered_bytes`. Alone it lasts ``max(source time, network
  time)``. Preloads run one after another in issue order (one queue); a preload starts once
  the previous one is done and the ``execute`` issued before it in the stream has ended
  (``execute(i)`` blocks every later instruction until it ends).
* ``execute(i)`` starts when the previous execute ended and ``preload(i)`` is done (an
  operator the stream does not preload waits for the previous execute only). It lasts the
  distribution phase -- every flow of :func:`~runtime_sim.contract.preload_chunks.distribution` of its
  chunked inputs, costed together as one phase on the topology, a core's chunk multicast
  to its block -- plus the re-layout of its on-chip inputs and its steps, as costed for
  every run (:mod:`runtime_sim.timing.work`).
* Interconnect contention: while an execute runs, the preload in progress gets only the
  link share it leaves (``1 - link_busy_s / duration_s`` of the running operator: its
  transfer phases' bytes over bandwidth, hop latencies excluded), at full rate otherwise;
  the network progress is integrated between execute starts and ends. A preload's delay
  beyond its uncontended duration is ``OpTiming.preload_stall_s``; the wait it causes on
  the compute array (each execute's start against a replay of the stream with uncontended
  preloads; an execute's share is the growth of that lag since the previous execute, at
  most its wait) is ``interconnect_stall_s`` and counts in ``stall_s``.
* SRAM, checked before the timeline on the stream's memory model (Elk §4.2, §4.5;
  :func:`runtime_sim.contract.resting.stream_sram_peaks`), the one the Elk pass budgets
  with and the functional device checks: at every instruction, per physical core, the
  execution side (while an operator executes, its device accounting
  (:mod:`runtime_sim.timing.work`): its partitions, live activations, shift buffer and
  resident idle state; between executes, what the last one left) plus the preload space
  (:func:`~runtime_sim.contract.preload_chunks.preload_bytes` of each preloaded input, on the
  operator's cores) of every operator whose preload was issued and whose execute has not
  started; an operator's own preload space becomes part of its execution space when it
  starts. Overflow raises :class:`~runtime_sim.contract.errors.SramOverflowError` naming the instruction's operator
  (:mod:`runtime_sim.contract.sram_budget`). On the timeline a preload holds its space from
  its start, after its issue: nothing the stream admits overflows there. The report's peaks
  (SRAM, preload space) are the stream model's.
* The ``"ideal"`` design (Elk §6.1 roofline): preloads have their own interconnect (no
  contention), distribution takes no time (its bytes still count), and the preload space
  and the execution space are each checked against the whole SRAM.

The host link serves a preload's host leg for its source time (the next transfer on it
starts after that leg's delivery ends); returns to the host are queued on it as for the
prefetch scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.program import PRELOAD
from runtime_sim.contract.resting import stream_sram_peaks
from runtime_sim.contract.sram_budget import IDEAL
from runtime_sim.contract.stream import Instruction
from runtime_sim.machine.stream_timing import preload_link_share
from runtime_sim.timing.events import Events, Slot
from runtime_sim.timing.work import Load, Work


@dataclass
class _Leg:
    """One source of a running preload (HBM or host) and its network delivery."""

    load: Load
    start: float
    remaining: float  # seconds of network delivery left at the full link rate
    net_end: float = -1.0  # when its delivery ended (-1: not yet)

    @property
    def source_end(self) -> float:
        return self.start + self.load.source_s


@dataclass
class _Active:
    """The preload in progress (preloads run one after another)."""

    work: int
    queued: int  # its position in the preload queue
    start: float
    legs: list[_Leg]
    last: float  # network progress integrated up to here
    version: int = 0


class StreamSchedule(Events):
    """A preload/execute instruction stream (Elk §4.5) on the timeline; see the module
    docstring ("Preload stream") for the rules and the SRAM check."""

    def __init__(self, works: list[Work], hw: HardwareSpec, stream: Sequence[Instruction],
                 offsets: Sequence[int], design: str, base: np.ndarray):
        super().__init__()
        self.works = works
        self.hw = hw
        self.ideal = design == IDEAL
        self.slots = [Slot() for _ in works]
        self.free = {"hbm": 0.0, "host": 0.0}
        self.pre: list[int] = []  # the preload queue (work indices, issue order)
        self.pre_after: list[int] = []  # per queued preload: the execute issued last before it
        self.exe: list[int] = []
        for ins in stream:
            w = offsets[ins.call] + ins.op
            if ins.kind == PRELOAD:
                self.pre.append(w)
                self.pre_after.append(self.exe[-1] if self.exe else -1)
                self.slots[w].preloaded = True
            else:
                self.exe.append(w)
        if self.exe != list(range(len(works))):  # run_stream checks it: programs in order
            raise DeviceProgramError("the preload stream must execute every operator once, in order")
        self.stream = [(ins.kind, offsets[ins.call] + ins.op) for ins in stream]
        self.preload_alone: list[float] = [0.0] * len(self.pre)  # its duration without contention
        self.qp = self.qe = 0
        self.active: _Active | None = None
        self.rate = 1.0  # link share the running execution leaves to the preload network
        self.running = -1
        self.base = base  # SRAM per core before anything ran (resident state, shift buffer)
        self.peak = int(base.max()) if base.size else 0
        self.peak_preload = 0
        self._version = 0

    def run(self) -> None:
        # the SRAM rule on the stream's memory model, before the timeline: the same
        # instruction and core overflow as on the functional device, and the reported peaks
        peaks = stream_sram_peaks(
            self.stream, [w.used for w in self.works],
            [w.resting if w.resting is not None else w.used for w in self.works],
            {i: w.preload_space for i, w in enumerate(self.works)
             if self.slots[i].preloaded and w.preload_space is not None},
            self.base, self.ideal, hw=self.hw, ops=[w.op for w in self.works])
        self._advance()
        self.drain()
        self.lags()
        self.peak, self.peak_preload = peaks

    # -- issue -------------------------------------------------------------------------------
    def _advance(self) -> None:
        """Start what the stream allows now: the next execute once the previous one ended and
        its preload is done; the next preload once the previous preload is done and the
        execute issued before it ended."""
        progress = True
        while progress:
            progress = False
            if self.qe < len(self.exe) and self.running < 0:
                i = self.exe[self.qe]
                if not self.slots[i].preloaded or self.slots[i].loads_done:
                    self.qe += 1
                    self._start_execute(i)
                    progress = True
            if self.active is None and self.qp < len(self.pre):
                after = self.pre_after[self.qp]
                if after < 0 or self.slots[after].ended:
                    self.qp += 1
                    self._start_preload(self.qp - 1)
                    progress = True

    def _start_execute(self, i: int) -> None:
        slot, work = self.slots[i], self.works[i]
        self._integrate()
        self.running = i
        slot.exec_start = self.now
        slot.exec_end = self.now + work.duration_s
        prev = self.slots[i - 1] if i else None
        if slot.preloaded and prev is not None:
            slot.prefetched = slot.load_start < prev.exec_end
        self.at(slot.exec_end, lambda: self._end_execute(i))
        self._reschedule()

    def _end_execute(self, i: int) -> None:
        self._integrate()
        slot = self.slots[i]
        slot.ended = True
        self.running = -1
        stores = self.works[i].stores
        if stores:  # the host reads its output: chip -> host on the host links, in order
            start = max(self.now, self.free["host"])
            finish = start + sum(s.duration_s for s in stores)
            self.free["host"] = finish
            slot.store_interval = (start, finish)
        self._reschedule()
        self._advance()

    def _start_preload(self, q: int) -> None:
        k = self.pre[q]
        slot, work = self.slots[k], self.works[k]
        self._integrate()
        slot.load_start = self.now
        legs = []
        for load in work.loads:
            start = max(self.now, self.free[load.kind])
            self.free[load.kind] = start + load.source_s  # the source is busy that long
            legs.append(_Leg(load, start, load.network.time_s))
        self.active = _Active(k, q, self.now, legs, self.now)
        self._reschedule()

    # -- the preload in progress: network progress at the share executions leave ------------
    def _share(self) -> float:
        if self.ideal or self.running < 0:
            return 1.0
        work = self.works[self.running]
        return preload_link_share(work.link_busy_s, work.duration_s)

    def _integrate(self) -> None:
        """Advance the running preload's network delivery to ``now`` at the current share."""
        a = self.active
        if a is None:
            return
        for leg in a.legs:
            if leg.net_end >= 0:
                continue
            t0 = max(a.last, leg.start)
            if leg.remaining <= 0:
                leg.net_end = leg.start
                continue
            if self.now <= t0 or self.rate <= 0:
                continue
            done = self.rate * (self.now - t0)
            if done >= leg.remaining:
                leg.net_end = t0 + leg.remaining / self.rate
                leg.remaining = 0.0
            else:
                leg.remaining -= done
        a.last = max(a.last, self.now)

    def _reschedule(self) -> None:
        """New share, and the running preload's projected end under it."""
        self.rate = self._share()
        a = self.active
        if a is None:
            return
        self._version += 1
        a.version = self._version
        finish = self.now
        for leg in a.legs:
            if leg.net_end >= 0:
                net_end = leg.net_end
            elif leg.remaining <= 0:
                net_end = leg.start
            elif self.rate <= 0:
                return  # stalled until the execution ends (its end reschedules)
            else:
                net_end = max(self.now, leg.start) + leg.remaining / self.rate
            finish = max(finish, leg.source_end, net_end)
        version = a.version
        self.at(finish, lambda: self._preload_done(version))

    def _preload_done(self, version: int) -> None:
        a = self.active
        if a is None or a.version != version:
            return  # superseded by a reschedule
        self._integrate()
        k = a.work
        slot = self.slots[k]
        q = a.queued
        alone = a.start
        for leg in a.legs:
            if leg.net_end < 0:  # rounding: what is left ends now
                leg.net_end, leg.remaining = self.now, 0.0
            end = max(leg.source_end, leg.net_end)
            alone = max(alone, leg.start + leg.load.duration_s)
            self.free[leg.load.kind] = max(self.free[leg.load.kind], end)
            if leg.load.kind == "hbm":
                slot.hbm_interval = (leg.start, end)
            else:
                slot.host_interval = (leg.start, end)
        slot.load_end = self.now
        slot.preload_delay = max(0.0, self.now - alone)
        self.preload_alone[q] = alone - a.start
        slot.loads_done = True
        self.active = None
        self._advance()

    def lags(self) -> None:
        """Per execute, the wait that link contention caused (``Slot.contention_delay``):
        the same stream replayed with every preload at its uncontended duration (execution
        times do not change) gives each execute's start without contention; its lag is the
        difference, and an execute's share is the growth of the lag since the previous
        execute, at most its wait."""
        cf_pre_end = [0.0] * len(self.pre)
        cf_exec_end = [0.0] * len(self.works)
        queue_of = {w: q for q, w in enumerate(self.pre)}
        q = 0
        prev_end = 0.0  # contention-free end of the last execute
        prev_lag = 0.0
        for kind, w in self.stream:
            slot = self.slots[w]
            if kind == PRELOAD:
                after = self.pre_after[q]
                start = max(cf_pre_end[q - 1] if q else 0.0, cf_exec_end[after] if after >= 0 else 0.0)
                cf_pre_end[q] = start + self.preload_alone[q]
                q += 1
                continue
            start = prev_end
            if w in queue_of:
                start = max(start, cf_pre_end[queue_of[w]])
            cf_exec_end[w] = start + (slot.exec_end - slot.exec_start)
            lag = max(0.0, slot.exec_start - start)
            wait = max(0.0, slot.exec_start - (self.slots[w - 1].exec_end if w else 0.0))
            slot.contention_delay = min(wait, max(0.0, lag - prev_lag))
            prev_end, prev_lag = cf_exec_end[w], lag
