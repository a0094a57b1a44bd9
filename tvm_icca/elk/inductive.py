"""Two-level inductive operator scheduling (Elk §4.2, Lemma 4.1, Theorem 4.2, Appendix A).

Vocabulary. ``order`` is the preload order: the operators that preload, by position (Elk §4.4
allows it to differ from the execution order). ``horizon[i]`` is the number of preloads issued
before ``execute(i)`` in the instruction stream. ``m[i]`` (:func:`min_horizons`) is the least
horizon that issues every preload of operators ``<= i``; the *preload number* is
``p_i = horizon[i] - m[i]``. Operator i's *window* is the set of operators at positions
``< horizon[i]`` with index ``> i``: preloaded (or being preloaded) while i executes.

Device semantics (Elk §4.5), evaluated by :func:`forward_times` with earliest starts:

* the stream is ``preloads [horizon[i-1], horizon[i])`` then ``execute(i)``, for i = 0..N-1;
* ``execute(i)`` blocks every later instruction until it ends, so preload k starts after the
  execute issued just before it ended and after preload k-1 ended (one HBM queue);
* ``preload(j)`` blocks only ``execute(j)``.

Backward recurrence (Theorem 4.2), with ``L_i(h)`` the window time and ``D_j`` the preload time::

    T_e_exe(i) = min(T_s_exe(i+1), T_s_pre(horizon[i]))     # T_s_pre(K) = +inf, T_s_exe(N) = 0
    T_s_exe(i) = T_e_exe(i) - L_i(horizon[i])
    T_s_pre(k) = min(T_s_exe(order[k]), T_s_pre(k+1)) - D_order[k]

choosing for each i, from the last, the horizon that maximizes ``T_s_exe(i)``.

Validity condition. A stream issues preloads monotonically, so horizons are non-decreasing
(``p_{i-1} <= p_i + 1`` in execution order). A preload-number vector that violates it produces the
same stream as its *effective* vector (``horizon[i] = max_{i' <= i} m[i'] + p_{i'}``), in which
operator i really executes beside the larger window; brute force must therefore price L at the
effective preload number. The recurrence enforces ``horizon[i] <= horizon[i+1]``. This costs
nothing when L is non-decreasing in the horizon: if an optimum uses ``horizon[i] > horizon[i+1]``
chosen by the recurrence (h'), then h' itself gives ``T_s_pre(h') >= T_s_exe(i+1)`` (op i+1's window
ends before preload h' starts), hence ``T_e_exe(i) = T_s_exe(i+1)`` — as late as any larger horizon
allows — with an L no larger. Every quantity is a non-decreasing function of later ones, so by
induction the recurrence's times dominate those of every valid vector, and the plan is exactly
optimal (tests/test_elk_inductive.py checks it against brute force). With L from the memory
allocation (§4.3), which depends on state, the recurrence is the paper's heuristic.

The forward and backward evaluations of a fixed schedule (fixed L, D, horizons) are the longest
path of the same precedence graph, so their totals agree (:func:`backward_total`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


class InfeasibleError(ValueError):
    """No preload number of some operator fits on chip (even at the smallest points)."""


@dataclass(frozen=True)
class InductiveResult:
    """The recurrence's choice: horizons, window times used, latest starts, and total time."""

    horizon: tuple[int, ...]
    window_s: tuple[float, ...]
    exec_start: tuple[float, ...]   # T_s_exe(i), relative to the end (<= 0)
    pre_start: tuple[float, ...]    # T_s_pre(k) per position, relative to the end
    total_s: float


def min_horizons(n_ops: int, order: Sequence[int]) -> list[int]:
    """``m[i]``: least number of preloads issued before ``execute(i)`` (all of ops <= i issued)."""
    pos = {op: k for k, op in enumerate(order)}
    out, cur = [], 0
    for i in range(n_ops):
        if i in pos:
            cur = max(cur, pos[i] + 1)
        out.append(cur)
    return out


def early_members(n_ops: int, order: Sequence[int], m: Sequence[int]) -> list[tuple[int, ...]]:
    """Per op i, the operators at positions ``< m[i]`` with index ``> i`` (preloaded early by a
    reordering), by position; they are in every window of i."""
    out: list[tuple[int, ...]] = []
    pending: dict[int, int] = {}    # op -> position
    ptr = 0
    for i in range(n_ops):
        while ptr < m[i]:
            pending[order[ptr]] = ptr
            ptr += 1
        pending.pop(i, None)   # ops < i were added by their own step at the latest, and popped
        out.append(tuple(sorted(pending, key=pending.__getitem__)))
    return out


def window_members(order: Sequence[int], early: Sequence[int], m_i: int, h: int) -> tuple[int, ...]:
    """Operator i's window at horizon h: early members plus positions ``m_i .. h-1``."""
    return tuple(early) + tuple(order[m_i:h])


def inductive_schedule(n_ops: int, order: Sequence[int],
                       window_time: Callable[[int, int], float | None],
                       preload_time: Callable[[int], float],
                       commit: Callable[[int, int], None] | None = None,
                       max_preload_number: int | None = None) -> InductiveResult:
    """The backward recurrence of Elk §4.2 (see the module docstring).

    ``window_time(i, h)`` is ``L_i`` at horizon h, or ``None`` if the window cannot fit even at its
    smallest points; windows only grow with h, so the scan over h stops there (this bounds p_max).
    It is called for i from the last operator down, h ascending. ``preload_time(j)`` is ``D_j``,
    asked when position pos[j] becomes computable. ``commit(i, h)`` is told the choice for i
    (the allocator fixes i's execute point and shrinks its window's preload points then).
    """
    K = len(order)
    m = min_horizons(n_ops, order)
    t_pre = [math.inf] * (K + 1)
    t_exe = [0.0] * (n_ops + 1)
    horizon = [0] * n_ops
    window_s = [0.0] * n_ops
    ready = K            # positions >= ready have t_pre
    cap = K              # horizon[i] <= horizon[i+1] (validity)
    for i in range(n_ops - 1, -1, -1):
        while ready > m[i]:
            ready -= 1
            t_pre[ready] = min(t_exe[order[ready]], t_pre[ready + 1]) - preload_time(order[ready])
        hi = cap if max_preload_number is None else min(cap, m[i] + max_preload_number)
        best_t, best_h, best_l = -math.inf, -1, 0.0
        after_i = t_exe[i + 1]
        for h in range(m[i], hi + 1):
            length = window_time(i, h)
            if length is None:
                break
            pre = t_pre[h]
            t = (pre if pre < after_i else after_i) - length   # min(t_exe[i + 1], t_pre[h])
            if t > best_t:      # strict: ties keep the smaller window (less memory pressure)
                best_t, best_h, best_l = t, h, length
        if best_h < 0:
            raise InfeasibleError(f"operator {i} does not fit on chip with any preload number")
        t_exe[i], horizon[i], window_s[i], cap = best_t, best_h, best_l, best_h
        if commit is not None:
            commit(i, best_h)
    while ready > 0:
        ready -= 1
        t_pre[ready] = min(t_exe[order[ready]], t_pre[ready + 1]) - preload_time(order[ready])
    start = min([t_exe[0]] + ([t_pre[0]] if K else []))
    return InductiveResult(tuple(horizon), tuple(window_s), tuple(t_exe[:n_ops]), tuple(t_pre[:K]),
                           -start if n_ops else 0.0)


@dataclass(frozen=True)
class Times:
    """Earliest-start times of a schedule (seconds from the first instruction)."""

    pre_start: tuple[float, ...]    # per position of the preload order
    pre_end: tuple[float, ...]
    exec_start: tuple[float, ...]   # per operator
    exec_end: tuple[float, ...]
    total_s: float


def check_horizons(n_ops: int, order: Sequence[int], horizon: Sequence[int],
                   m: Sequence[int] | None = None) -> None:
    """Raise ValueError unless horizons are non-decreasing, within the order, and cover every op's
    own preload (the schedule's validity); ``m``: the order's :func:`min_horizons`, if known."""
    if m is None:
        m = min_horizons(n_ops, order)
    if len(horizon) != n_ops:
        raise ValueError("one horizon per operator")
    prev = 0
    for i, h in enumerate(horizon):
        if h < m[i] or h > len(order) or h < prev:
            raise ValueError(f"invalid horizon {h} for operator {i} (min {m[i]}, previous {prev})")
        prev = h
    if n_ops and horizon[-1] != len(order):
        raise ValueError("every preload must be issued before the last execute")


def forward_times(n_ops: int, order: Sequence[int], horizon: Sequence[int],
                  exec_s: Sequence[float], preload_s: Sequence[float]) -> Times:
    """Earliest-start evaluation of the instruction stream (device semantics, Elk §4.5).

    ``exec_s[i]`` is op i's duration, ``preload_s[j]`` op j's preload duration (ops not in
    ``order`` have none)."""
    K = len(order)
    pos = {op: k for k, op in enumerate(order)}
    pre_s, pre_e = [0.0] * K, [0.0] * K
    ex_s, ex_e = [0.0] * n_ops, [0.0] * n_ops
    issued, last_pre_end, last_exec_end = 0, 0.0, 0.0
    for i in range(n_ops):
        while issued < horizon[i]:
            start = max(last_pre_end, last_exec_end)
            pre_s[issued], pre_e[issued] = start, start + preload_s[order[issued]]
            last_pre_end = pre_e[issued]
            issued += 1
        start = last_exec_end
        if i in pos:
            start = max(start, pre_e[pos[i]])
        ex_s[i], ex_e[i] = start, start + exec_s[i]
        last_exec_end = ex_e[i]
    total = max([last_exec_end] + pre_e)
    return Times(tuple(pre_s), tuple(pre_e), tuple(ex_s), tuple(ex_e), total)


def backward_total(n_ops: int, order: Sequence[int], horizon: Sequence[int],
                   exec_s: Sequence[float], preload_s: Sequence[float]) -> float:
    """The recurrence's total for a fixed schedule: equals :func:`forward_times`' total."""
    hz = list(horizon)
    K = len(order)
    m = min_horizons(n_ops, order)
    t_pre = [math.inf] * (K + 1)
    t_exe = [0.0] * (n_ops + 1)
    ready = K
    for i in range(n_ops - 1, -1, -1):
        while ready > m[i]:
            ready -= 1
            t_pre[ready] = min(t_exe[order[ready]], t_pre[ready + 1]) - preload_s[order[ready]]
        t_exe[i] = min(t_exe[i + 1], t_pre[hz[i]]) - exec_s[i]
    while ready > 0:
        ready -= 1
        t_pre[ready] = min(t_exe[order[ready]], t_pre[ready + 1]) - preload_s[order[ready]]
    start = min([t_exe[0]] + ([t_pre[0]] if K else []))
    return -start if n_ops else 0.0
