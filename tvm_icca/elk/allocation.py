"""Cost-aware on-chip memory allocation inside one window (Elk §4.3, "inter-operator tradeoff").

A window is the executing operator plus the operators preloaded beside it (Elk Fig. 11). Every
operator starts at its fastest point: the executing one at ``execs[0]``, a preloaded one at its
current preload point (``preloads[e][0]``, MaxPreload, the first time a window holds it; a point
chosen by a window evaluated earlier in the backward pass otherwise, since a preloaded operator
keeps one preload point across all its windows and later windows may only shrink it). Then, while
the window does not fit (:func:`tvm_icca.elk.overlap_model.window_bytes`), take over all operators the next
smaller Pareto point with the largest ``bytes saved / time added``; a step that adds no time is
taken first (largest saving first). The time of a step is its effect on the window time
(:func:`tvm_icca.elk.overlap_model.exec_duration_sums`): the executing operator's slower point, or a
preloaded operator's larger distribution time (charged to this window, the one that shrinks it)
and its changed network traffic (contention). If even the smallest points do not fit, the window
is infeasible (``None``); otherwise the greedy always ends feasible, since it can reach them.
The window's preloads also wait before the operator starts, beside its own preload and what the
device holds then (:func:`~tvm_icca.elk.overlap_model.side_bytes`): the allocation is the first
state of the greedy that fits both instants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tvm_icca.elk.overlap_model import exec_duration_sums, window_bytes
from tvm_icca.elk.tradeoffs import ElkMachine, OpTradeoffs


@dataclass(frozen=True)
class WindowPlan:
    """The allocation of one window: the executing op's point, the members' preload points, the
    window time ``L`` (execution with contention plus added distribution time) and its bytes."""

    exec_choice: int
    preload_choices: tuple[int, ...]
    time_s: float
    space: int


def allocate_window(op: OpTradeoffs, members: Sequence[tuple[OpTradeoffs, int, int]],
                    machine: ElkMachine, own_space: Sequence[int] = ()) -> WindowPlan | None:
    """Elk §4.3's greedy for executing ``op`` beside ``members`` = (op, exec choice, current
    preload point) of each preloaded operator; ``None`` if the window cannot fit at all.
    ``own_space[e]``: the space of ``op``'s own preload point at execute point ``e``, waiting
    with the window before ``op`` starts (:meth:`WindowShrinker.plan`)."""
    return WindowShrinker(op, members, machine).plan(op.live_bytes, op.waiting_bytes, own_space)


class WindowShrinker:
    """The greedy of :func:`allocate_window` as a trajectory, resumed on demand.

    The greedy's steps do not depend on the capacity, only where it stops does: it stops at
    the first state whose bytes fit. So the states are kept, and one trajectory answers every
    amount of live activation bytes beside the window (:meth:`plan`); identical layers of an
    LLM differ in exactly that (each layer's new KV entries stay live to the model's end), so
    their windows share one trajectory."""

    def __init__(self, op: OpTradeoffs, members: Sequence[tuple[OpTradeoffs, int, int]],
                 machine: ElkMachine) -> None:
        self._op = op
        self._fronts = [m.preloads[e] for m, e, _ in members]
        self._cap = machine.sram_bytes
        self._sep = machine.separate_interconnect
        fronts, cur = self._fronts, [c for _, _, c in members]
        # the members' sums, left to right (a window one member larger adds to them: extended)
        self._sums0 = (sum(f[c].network_s for f, c in zip(fronts, cur)),
                       sum(f[c].load_s for f, c in zip(fronts, cur)),
                       sum(f[c].space for f, c in zip(fronts, cur)),
                       sum(f[-1].space for f in fronts))
        self._start(cur)

    def _start(self, cur: list[int]) -> None:
        """The trajectory's first state: every member at ``cur``, the op at its fastest point."""
        op = self._op
        net, load, space, smallest = self._sums0
        self._cur0 = tuple(cur)
        self._e = 0
        self._cur = cur
        self._net = net
        self._load = load
        self._added = 0.0       # distribution time added by shrinking members here
        # bytes without live activations (window_bytes is additive in them)
        self._space = window_bytes(op.execs[0].space, (space,), 0)
        self._smallest = window_bytes(op.execs[-1].space, (smallest,), 0)
        self._now = self._cost(self._e, self._net, self._load, self._added)
        self._states: list[tuple[int, int, tuple[int, ...], float]] = [
            (self._space, self._e, self._cur0, self._now)]

    def extended(self, member: tuple[OpTradeoffs, int, int]) -> "WindowShrinker":
        """The shrinker of this window with one more member (op, exec choice, current preload
        point) preloaded beside it: what ``WindowShrinker(op, members + [member], machine)``
        is, without summing the members again (the sums run left to right either way)."""
        m, e, c = member
        front = m.preloads[e]
        child = WindowShrinker.__new__(WindowShrinker)
        child._op = self._op
        child._fronts = self._fronts + [front]
        child._cap = self._cap
        child._sep = self._sep
        net, load, space, smallest = self._sums0
        child._sums0 = (net + front[c].network_s, load + front[c].load_s, space + front[c].space,
                        smallest + front[-1].space)
        child._start(list(self._cur0) + [c])
        return child

    def plan(self, live_bytes: int, waiting_bytes: int = 0,
             own_space: Sequence[int] = ()) -> WindowPlan | None:
        """The window's allocation beside ``live_bytes`` of live activations per core while
        the operator executes, and beside ``waiting_bytes`` held before it starts with its own
        preload point's space (``own_space[e]`` at execute point ``e``; empty: it loads
        nothing), both instants of :func:`tvm_icca.elk.overlap_model.window_bytes`: the first
        state of the trajectory that fits both (:meth:`fit`)."""
        state = self.fit(live_bytes, waiting_bytes, own_space)
        if state is None:
            return None
        space, e, cur, now = state
        members = space - self._op.execs[e].space
        waiting = waiting_bytes + (own_space[e] if own_space else 0)
        return WindowPlan(e, cur, now, int(window_bytes(self._op.execs[e].space, (members,),
                                                        live_bytes, waiting_bytes,
                                                        waiting - waiting_bytes)))

    def fit(self, live_bytes: int, waiting_bytes: int = 0,
            own_space: Sequence[int] = ()) -> tuple[int, int, tuple[int, ...], float] | None:
        """The state of :meth:`plan`'s allocation, (bytes without live activations, execute
        point, members' preload points, window time), or None: what the recurrence reads of
        the many windows it tries (:func:`tvm_icca.elk.inductive_draft.inductive_draft`),
        without building a :class:`WindowPlan` for each."""
        budget = self._cap - live_bytes
        if self._smallest > budget:
            return None
        wait_budget = self._cap - waiting_bytes - (min(own_space) if own_space else 0)
        if self._sums0[3] > wait_budget:   # the members' smallest points wait beside too much
            return None
        states = self._states
        if states[-1][0] > budget:
            self._shrink_to(budget)
        lo, hi = 0, len(states) - 1     # spaces decrease along the trajectory: first that fits
        while lo < hi:
            mid = (lo + hi) // 2
            if states[mid][0] <= budget:
                hi = mid
            else:
                lo = mid + 1
        execs = self._op.execs
        k = lo
        while True:     # the members' spaces never grow along it: the first that fits both
            state = states[k]
            e = state[1]
            waiting = waiting_bytes + (own_space[e] if own_space else 0)
            if state[0] - execs[e].space + waiting <= self._cap:
                return state
            k += 1
            if k == len(states) and not self._step():
                return None

    def _cost(self, ep_idx: int, net: float, load: float, added: float) -> float:
        ep = self._op.execs[ep_idx]
        return exec_duration_sums(ep.time_s, ep.traffic_s, net, load, self._sep) + added

    def _shrink_to(self, budget: int) -> None:
        while self._space > budget:
            stepped = self._step()
            assert stepped     # the smallest points fit, so some step remains

    def _step(self) -> bool:
        """The greedy's next state (False: every point is at its smallest already)."""
        op, fronts, cur = self._op, self._fronts, self._cur
        e, net, load, added, now = self._e, self._net, self._load, self._added, self._now
        best_key, best = None, None
        if e + 1 < len(op.execs):
            saved = op.execs[e].space - op.execs[e + 1].space
            dt = self._cost(e + 1, net, load, added) - now
            best_key, best = _rank(saved, dt), (-1, saved)
        for j, (f, c) in enumerate(zip(fronts, cur)):
            if c + 1 >= len(f):
                continue
            a, b = f[c], f[c + 1]
            saved = a.space - b.space
            dt = self._cost(e, net - a.network_s + b.network_s, load - a.load_s + b.load_s,
                            added + b.distribute_s - a.distribute_s) - now
            key = _rank(saved, dt)
            if best_key is None or key > best_key:
                best_key, best = key, (j, saved)
        if best is None:
            return False
        j, saved = best
        if j < 0:
            self._e += 1
        else:
            a, b = fronts[j][cur[j]], fronts[j][cur[j] + 1]
            self._net += b.network_s - a.network_s
            self._load += b.load_s - a.load_s
            self._added += b.distribute_s - a.distribute_s
            cur[j] += 1
        self._space -= saved
        self._now = self._cost(self._e, self._net, self._load, self._added)
        self._states.append((self._space, self._e, tuple(cur), self._now))
        return True


def _rank(saved: int, dt: float) -> tuple[int, float]:
    """Order of steps: those adding no time first (by bytes saved), then by bytes saved per second."""
    if dt <= 0.0:
        return (1, float(saved))
    return (0, saved / dt)
