"""Per-operator trade-off tables, the only input of the Elk planning algorithms.

The compiler extracts these tables from its execution plans; the algorithms in this package never
look inside a plan (``ExecPoint.plan`` / ``PreloadPoint.chunks`` are opaque handles), so they run on
hand-written tables in tests and on synthetic models in benchmarks.

Elk §4.3 names three intra-operator trade-offs:

* tradeoff 1, execute state: execution space vs execution time (:class:`ExecPoint`);
* tradeoffs 2 and 3, preload state: for one execute-state plan, preload space vs the time of the
  distribution phase that turns preloaded chunks into the execute-state layout
  (:class:`PreloadPoint`; MaxPreload and MinPreload are the two ends of its Pareto front).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExecPoint:
    """One execute-state plan of an operator (Elk §4.3, tradeoff 1).

    ``time_s`` is its execution time (compute plus its own inter-core shifts) without contention;
    ``space`` the execution space in bytes per core (max over cores); ``traffic_s`` the time its own
    inter-core traffic keeps a core's links busy (<= ``time_s``), used for interconnect contention
    (Elk §2.3, §4.3). ``plan`` is the caller's handle, never inspected.
    """

    time_s: float
    space: int
    traffic_s: float
    plan: Any = None


@dataclass(frozen=True)
class PreloadPoint:
    """One preload-state plan of an execute-state plan (Elk §4.3, tradeoffs 2 and 3).

    ``space``: bytes per core held from the preload until the operator executes;
    ``distribute_s``: the distribution phase at execute time (0 for MaxPreload);
    ``load_s``: the preload's duration alone, max(HBM bytes / HBM bandwidth, network delivery);
    ``network_s``: how long the delivery keeps a core's links busy (interconnect contention).
    """

    space: int
    distribute_s: float
    load_s: float
    network_s: float
    chunks: Any = None


@dataclass(frozen=True)
class OpTradeoffs:
    """All trade-off points of one operator, in execution order position (Elk §4.3).

    ``execs`` is the execute-state Pareto front, fastest first (space strictly decreasing, time
    strictly increasing). ``preloads[e]`` is the preload-state Pareto front of ``execs[e]``,
    MaxPreload first (largest space, ``distribute_s == 0``), MinPreload last; ``preloads == ()``
    when the operator loads nothing off chip. Operators with equal ``key`` have identical
    trade-off points (used to memoize windows and to detect repeated layers, Elk §4.4); their
    ``live_bytes``, the per-core space of other live activations reserved while the operator
    executes, may differ (a layer of an LLM holds the cache updates of every layer before it),
    so whatever depends on it keys on it too. ``waiting_bytes`` likewise: the per-core space
    the device holds from the end of the operator before to this one's start (``live_bytes``
    and the inputs this operator reads last, still where their producers left them), beside
    which the preloads issued in that gap -- its own included -- are held
    (:mod:`tvm_icca.elk.overlap_model`).

    Assumption (documented, not checked): a preload point's space is at most its execute point's
    space, because the preloaded chunks become part of the execution space when the operator starts.
    """

    key: str
    execs: tuple[ExecPoint, ...]
    preloads: tuple[tuple[PreloadPoint, ...], ...]
    hbm_bytes: float
    live_bytes: int
    waiting_bytes: int = 0

    @property
    def loads(self) -> bool:
        """Whether the operator has a preload (off-chip data) at all."""
        return bool(self.preloads)


@dataclass(frozen=True)
class ElkMachine:
    """What the algorithms need to know of the chip.

    ``sram_bytes`` is per core, the receive/shift buffer already subtracted.
    ``separate_interconnect`` (the Ideal design, Elk §6.1): preload traffic never contends with
    execution traffic. ``preload_sram_bytes``: the per-core SRAM of the Ideal design's own
    preload memory (Elk §6.1: preload and execution each have a full-sized one; ``None``: as
    large as ``sram_bytes``). The compiler takes both from the device's SRAM rule,
    :func:`runtime_sim.contract.sram_budget.sram_budget`.
    """

    sram_bytes: int
    separate_interconnect: bool = False
    preload_sram_bytes: int | None = None

    @property
    def preload_capacity(self) -> int:
        """Bytes per core the Ideal design's preloads may hold at once."""
        return self.sram_bytes if self.preload_sram_bytes is None else self.preload_sram_bytes
