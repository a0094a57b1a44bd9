"""The memory and time model shared by every Elk algorithm in this package (Elk §2.2, §4.2, §4.3).

Memory (one function, :func:`window_bytes`). While operator ``i`` executes, a core's SRAM holds

    execs[e_i].space                         (i's execution space; its own preloaded chunks were
                                              released into it when it started)
  + sum of preload spaces of the operators preloaded but not yet executed
    (the positions ``< horizon[i]`` of the preload order whose operator index is ``> i``:
    its *window*, Elk §4.2 / Fig. 10)
  + live_bytes(i)                            (other live activations, reserved explicitly)

and this must be ``<= ElkMachine.sram_bytes`` (the receive/shift buffer is already subtracted).
Before ``i`` executes -- from the end of operator ``i - 1``, while the preloads issued before
``execute(i)`` start -- the same core holds

    waiting_bytes(i)                         (every tensor the device still holds then, by the
                                              lifetime rule of runtime_sim.contract.lifetimes:
                                              live_bytes(i) and the inputs i reads last, still
                                              where their producers left them)
  + i's own preload space                    (not yet part of its execution space)
  + the same window's preload spaces

(the devices' stream check, :func:`runtime_sim.contract.resting.stream_sram_peaks`, counts
both instants). So the window's preloads sit beside :func:`side_bytes`, the larger of the
two, and :func:`window_bytes` is the need of both instants. Counting the execution instant
alone missed the first: on a tiny Llama2-7B decode (16 cores, 808 usable bytes each) the
outputs of a split down projection's first seven pieces and their shared input, 464 bytes,
waited beside the last piece's preload and a later one's, 384 bytes (848 in all), where the
execution instant needed 648.

Time (one function, :func:`exec_duration`). The window time of operator ``i`` is

    L_i = distribute_s(i's own preload point)
        + time_s                                           with a separate interconnect (Ideal)
        + max(time_s, traffic_s + overlapped_network_s)    with a shared interconnect

Elk §4.3 estimates contention "by dividing total traffic by link bandwidth": a core's links carry
i's own inter-core traffic (``traffic_s`` of link time) plus the part of the window's preload
deliveries that streams during i's execution. Preloads run one after another from one HBM queue,
so during ``time_s`` at most ``time_s`` of preload time elapses; the overlapped network time is
therefore ``min(sum network_s, time_s * sum network_s / sum load_s)`` over the window's preloads
(the window's average network share of its load time, over at most ``time_s``). It depends only on
the window, which the backward recurrence needs (``L_i`` must be a function of i's window alone).
Memory-access contention (remote reads stalling a core, Elk §2.3 footnote) is assumed to be part of
the caller's ``traffic_s``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from tvm_icca.elk.tradeoffs import ExecPoint, PreloadPoint


def side_bytes(exec_space, live_bytes, waiting_bytes=0, own_space=0):
    """Per-core SRAM bytes an operator's window of preloads sits beside (the module
    docstring): its execution space and live bytes while it executes, or what the device
    holds before it starts with its own preload space, whichever is larger (also
    elementwise, on arrays of the operators' bytes)."""
    executing, waiting = exec_space + live_bytes, waiting_bytes + own_space
    if type(executing) is int and type(waiting) is int:  # pylint: disable=unidiomatic-typecheck
        # the Elk searches' scalar case (a million calls in a search): numpy's ufunc on two
        # Python ints costs ten times the builtin
        return executing if executing >= waiting else waiting
    return np.maximum(executing, waiting)


def window_bytes(exec_space: int, preload_spaces: Iterable[int], live_bytes: int,
                 waiting_bytes: int = 0, own_space: int = 0) -> int:
    """Per-core SRAM bytes of an operator's window, before and while it executes: the memory
    model of this package (also elementwise, on arrays of the operators' bytes).
    ``waiting_bytes`` and ``own_space``: :attr:`~tvm_icca.elk.tradeoffs.OpTradeoffs.waiting_bytes`
    and the space of its own preload point (0 if it loads nothing)."""
    beside = side_bytes(exec_space, live_bytes, waiting_bytes, own_space)
    if type(beside) is not int and np.ndim(beside) == 0:  # pylint: disable=unidiomatic-typecheck
        beside = int(beside)
    return beside + sum(preload_spaces)


def overlapped_network_s(time_s: float, window: Sequence[PreloadPoint]) -> float:
    """Link time of the window's preload deliveries that overlaps an execution of ``time_s``."""
    net = sum(p.network_s for p in window)
    load = sum(p.load_s for p in window)
    return _overlap(time_s, net, load)


def _overlap(time_s: float, net: float, load: float) -> float:
    if net <= 0.0:
        return 0.0
    if load <= 0.0:
        return net
    return min(net, time_s * net / load)


def exec_duration(point: ExecPoint, distribute_s: float, window: Sequence[PreloadPoint],
                  separate_interconnect: bool) -> float:
    """The window time ``L_i`` of an execution (see the module docstring)."""
    if separate_interconnect:
        return distribute_s + point.time_s
    return distribute_s + max(point.time_s, point.traffic_s + overlapped_network_s(point.time_s, window))


def exec_duration_sums(time_s: float, traffic_s: float, net: float, load: float,
                       separate_interconnect: bool) -> float:
    """:func:`exec_duration` without distribution, from the window's sums (the allocator's O(1) form)."""
    if separate_interconnect:
        return time_s
    return max(time_s, traffic_s + _overlap(time_s, net, load))
