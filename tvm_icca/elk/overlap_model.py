"""The memory and time model shared by every Elk algorithm in this package (Elk §2.2, §4.2, §4.3).

Memory (one function, :func:`window_bytes`). While operator ``i`` executes, a core's SRAM holds

    execs[e_i].space                         (i's execution space; its own preloaded chunks were
                                              released into it when it started)
  + sum of preload spaces of the operators preloaded but not yet executed
    (the positions ``< horizon[i]`` of the preload order whose operator index is ``> i``:
    its *window*, Elk §4.2 / Fig. 10)
  + live_bytes(i)                            (other live activations, reserved explicitly)

and this must be ``<= ElkMachine.sram_bytes`` (the receive/shift buffer is already subtracted).

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

from tvm_icca.elk.tradeoffs import ExecPoint, PreloadPoint


def window_bytes(exec_space: int, preload_spaces: Iterable[int], live_bytes: int) -> int:
    """Per-core SRAM bytes while an operator executes: the memory model of this package
    (also elementwise, on arrays of the operators' bytes)."""
    return exec_space + sum(preload_spaces) + live_bytes


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
