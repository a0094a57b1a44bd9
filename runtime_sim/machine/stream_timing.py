"""When the instructions of a preload/execute stream run (Elk §4.5): the device's timing rules.

Both executors of a stream obey three one-way rules (:mod:`runtime_sim.contract.stream`): executes run
one after another, each once its own preload is done; preloads run one after another from one
queue, each once the execute issued before it has ended. Two more rules say how long things
take when they overlap, and they are the device's, written here once:

* **An execute keeps priority on the links.** Its duration does not change when a preload
  streams meanwhile.
* **A preload's network delivery gets the link share the running execute leaves**:
  :func:`preload_link_share`, ``1 - busy_s / duration_s`` of that execute (its links are
  busy for ``busy_s`` of its ``duration_s``: its transfers' bytes over bandwidth; the hop
  latency a chunk spends in flight holds no bandwidth and is not in it, see
  :attr:`runtime_sim.machine.phase_cost.PhaseCost.busy_s`), the whole links when nothing executes or the
  preload has its own interconnect (Elk's Ideal). The off-chip source (HBM) is not shared, so a
  preload ends when both its source time and its network delivery are done.

The timing simulator (:mod:`runtime_sim.timing.preload_stream_scheduler`) applies these rules on its event
timeline with every detail of a real run (an HBM and a host leg per preload, SRAM checks,
returns to the host). :func:`stream_times` applies the same rules to a stream whose preloads
have one leg each, which is what the compiler's Elk pass needs to estimate a schedule
(:func:`tvm_icca.elk.elk_schedule.estimate`) before any program exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

__all__ = ["StreamTimes", "preload_link_share", "stream_times"]

#: Relative slack below which a preload's remaining network delivery counts as done
#: (floating-point residue of integrating it piecewise).
_DONE = 1e-12


def preload_link_share(busy_s: float, duration_s: float) -> float:
    """Share of its links a running execute of ``duration_s`` seconds leaves to a preload's
    network delivery, when its own traffic holds their bandwidth for ``busy_s`` of that time
    (:attr:`runtime_sim.machine.phase_cost.PhaseCost.busy_s`, not the transfers' time with latency)."""
    if duration_s <= 0:
        return 1.0
    return 1.0 - min(1.0, busy_s / duration_s)


@dataclass(frozen=True)
class StreamTimes:
    """Start and end of every preload (in preload order) and execute (in execution order)."""

    pre_start: tuple[float, ...]
    pre_end: tuple[float, ...]
    exec_start: tuple[float, ...]
    exec_end: tuple[float, ...]
    total_s: float


def stream_times(order: Sequence[int], horizon: Sequence[int], exec_s: Sequence[float],
                 exec_busy_s: Sequence[float],
                 preload_source_s: Mapping[int, float] | Sequence[float],
                 preload_network_s: Mapping[int, float] | Sequence[float],
                 separate_interconnect: bool = False,
                 stop_at: float = math.inf) -> StreamTimes | None:
    """The stream's timeline under the device's rules (see the module docstring).

    ``order`` lists the preloaded operators in preload order; ``horizon[i]`` is how many of
    them are issued before ``execute(i)``. Per operator ``i`` (execution order):
    ``exec_s[i]`` its execute's duration and ``exec_busy_s[i]`` how long its own traffic
    holds its links' bandwidth; per preloaded operator ``j`` (indexed by operator):
    ``preload_source_s[j]`` the time its off-chip source needs and ``preload_network_s[j]``
    its network delivery alone. ``separate_interconnect``: preloads never share links.

    ``stop_at``: a caller that only wants timelines shorter than this (a search comparing
    candidates with its best) gets ``None`` as soon as the total is proven to be at least
    ``stop_at``. Two lower bounds prove it. First, the same stream with every preload
    delivered at the whole links (as with a separate interconnect): every start is the
    latest of earlier ends, so shorter preloads end nothing later. Then, while the timeline
    is computed, the time so far plus what either queue still has to run (executes run one
    after another, and so do preloads, each at least its source time and its network
    delivery at the whole links). A timeline that is returned is the same as without
    ``stop_at``.
    """
    n, K = len(exec_s), len(order)
    pos = {j: k for k, j in enumerate(order)}
    after = [-1] * K  # the execute issued last before each preload
    issued = 0
    for i in range(n):
        h = horizon[i]
        while issued < (K if K < h else h):
            after[issued] = i - 1
            issued += 1
    for k in range(issued, K):
        after[k] = n - 1
    # the share of the links each execute leaves to a preload (constant while it runs;
    # preload_link_share, inlined)
    share = ([1.0] * n if separate_interconnect else
             [1.0 if e <= 0 else 1.0 - (1.0 if b / e > 1.0 else b / e)
              for b, e in zip(exec_busy_s, exec_s)])
    preloaded = [i in pos for i in range(n)]
    bounded = stop_at < math.inf
    if bounded:
        # what each queue still has to run from a position on; the bound keeps a relative
        # margin far above the rounding of these sums in another order than the timeline's,
        # and lets every preload's delivery end up to its residue (_DONE) early
        limit = stop_at * (1.0 + 1e-10)
        residue = _DONE * max(1.0, limit)
        exec_left = [0.0] * (n + 1)
        for i in range(n - 1, -1, -1):
            exec_left[i] = exec_left[i + 1] + exec_s[i]
        alone = [max(preload_source_s[j], preload_network_s[j]) - residue for j in order]
        pre_left = [0.0] * (K + 1)
        for k in range(K - 1, -1, -1):
            pre_left[k] = pre_left[k + 1] + alone[k]
        if _alone_total(n, K, pos, after, exec_s, alone) >= limit:
            return None
    pre_s, pre_e = [math.nan] * K, [math.nan] * K
    ex_s, ex_e = [math.nan] * n, [math.nan] * n
    now = 0.0
    i = k = 0  # next execute, next preload
    running = -1  # the execute in progress
    active = -1  # the preload in progress
    remaining = source_end = 0.0  # its network delivery left, its source's end
    while i < n or k < K or running >= 0 or active >= 0:
        started = True
        while started:
            started = False
            if running < 0 and i < n and (not preloaded[i] or not math.isnan(pre_e[pos[i]])):
                running, ex_s[i] = i, now
                ex_e[i] = now + exec_s[i]
                i += 1
                started = True
            if active < 0 and k < K and (after[k] < 0 or not math.isnan(ex_e[after[k]])
                                         and ex_e[after[k]] <= now and after[k] != running):
                active, pre_s[k] = k, now
                j = order[k]
                remaining, source_end = preload_network_s[j], now + preload_source_s[j]
                k += 1
                started = True
        if bounded:
            exec_free = ex_e[running] if running >= 0 else now
            left = now + remaining - residue
            pre_free = (left if left > source_end else source_end) if active >= 0 else now
            if exec_free + exec_left[i] >= limit or pre_free + pre_left[k] >= limit:
                return None
        rate = share[running] if running >= 0 else 1.0
        if active >= 0:
            net_end = now + remaining / rate if rate > 0 else (now if remaining <= 0 else math.inf)
            end = net_end if net_end > source_end else source_end
            if running >= 0 and ex_e[running] <= end:
                t = ex_e[running]
            else:
                t = end
        elif running >= 0:
            t = ex_e[running]
        else:
            raise ValueError("the stream cannot proceed: an execute waits for a preload never issued")
        if active >= 0:
            remaining -= rate * (t - now)
            if not remaining > 0.0:     # max(0.0, remaining), as the builtin compares
                remaining = 0.0
        now = t
        if running >= 0 and ex_e[running] <= now:
            running = -1
        if active >= 0 and source_end <= now and remaining <= _DONE * (now if now > 1.0 else 1.0):
            pre_e[active], active = now, -1
    total = max([now] + [e for e in ex_e if not math.isnan(e)])
    return StreamTimes(tuple(pre_s), tuple(pre_e), tuple(ex_s), tuple(ex_e), total)


def _alone_total(n: int, K: int, pos: Mapping[int, int], after: Sequence[int],
                 exec_s: Sequence[float], alone: Sequence[float]) -> float:
    """The total of a stream whose preload at position ``k`` takes ``alone[k]`` (its time
    with the whole links), by the same rules: a lower bound of :func:`stream_times`'s."""
    pre_end = [0.0] * K
    ex_end = [0.0] * n
    last_pre = last_ex = 0.0
    k = 0
    for i in range(n + 1):
        # the preloads issued after execute i - 1: once it and the preload before have ended
        while k < K and after[k] == i - 1:
            start = last_ex if last_ex > last_pre else last_pre
            last_pre = pre_end[k] = start + alone[k]
            k += 1
        if i < n:
            start = last_ex
            p = pos.get(i)
            if p is not None and pre_end[p] > start:
                start = pre_end[p]
            last_ex = ex_end[i] = start + exec_s[i]
    return last_ex if last_ex > last_pre else last_pre
