"""Elk-Dyn's draft on one preload order: the inductive recurrence (Elk §4.2) with window times
from the cost-aware allocation (§4.3), at a contention price.

:func:`inductive_draft` runs :func:`tvm_icca.elk.inductive.inductive_schedule` with each
window's time from :class:`tvm_icca.elk.allocation.WindowShrinker`, every operator starting at
its fastest plan over execution, distribution and preload time together (:func:`_joint_starts`,
:func:`fastest_preload`). Contention on the links is priced either inside the windows or, with a
``stretch``, on the preloads' delivery (:func:`average_stretch` is the run's average). Elk-Dyn
and Elk-Full (:mod:`tvm_icca.elk.designs`) call it per order and per contention price.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from runtime_sim.machine.stream_timing import preload_link_share
from tvm_icca.elk.allocation import WindowShrinker
from tvm_icca.elk.draft import Draft
from tvm_icca.elk.inductive import early_members, inductive_schedule, min_horizons
from tvm_icca.elk.tradeoffs import ElkMachine, OpTradeoffs, PreloadPoint


def inductive_draft(ops: Sequence[OpTradeoffs], machine: ElkMachine, order: tuple[int, ...],
                    memo: dict, stretch: float | None = None) -> Draft:
    """§4.2 + §4.3: the recurrence whose window times come from the cost-aware allocation.

    With ``stretch`` the contention is priced the way the device resolves it instead of
    inside the windows (:func:`~tvm_icca.elk.elk_schedule.estimate`): executions keep their own
    time, and every preload's network delivery takes ``stretch`` times its time alone (the link
    share the executions it overlaps leave, on average: :func:`average_stretch`)."""
    n = len(ops)
    m = min_horizons(n, order)
    early = early_members(n, order, m)
    ops, offset = _joint_starts(ops, stretch, memo)
    ex = [0] * n
    pc = {j: 0 for j in order}
    tried: dict[int, tuple] = {}   # horizon -> its window's WindowShrinker.fit state
    window_machine = machine if stretch is None else replace(machine, separate_interconnect=True)

    # The window memo is a trie: from the executing operator (and the pricing) down through
    # its members' (key, execute point, preload point), each node holding the window's greedy
    # trajectory (one per window content, whatever the live bytes beside it). The recurrence
    # scans h upwards for one i at a time, and ex / pc only change on commit, so each call
    # steps one member down from the last one's node (and extends its trajectory's start).
    scan: list = [None, None, 0]     # the op being scanned, its node, members below the node

    def child(node: _Node, j: int) -> _Node:
        item = (ops[j].key, ex[j], pc[j])
        below = node.children.get(item)
        if below is None:
            below = node.children[item] = _Node(node.shrinker.extended((ops[j], ex[j], pc[j])))
        return below

    def window_time(i: int, h: int) -> float | None:
        if scan[0] != i or h < m[i] + scan[2]:
            root = (stretch is None, ops[i].key)
            node = memo.get(root)
            if node is None:
                node = memo[root] = _Node(WindowShrinker(ops[i], (), window_machine))
            for j in early[i]:
                node = child(node, j)
            scan[0], scan[1], scan[2] = i, node, 0
        node = scan[1]
        for j in order[m[i] + scan[2]:h]:
            node = child(node, j)
        scan[1], scan[2] = node, h - m[i]
        state = node.shrinker.fit(ops[i].live_bytes, ops[i].waiting_bytes, own_space(i))
        if state is None:
            return None
        tried[h] = state
        return state[3]

    own: dict[int, tuple[int, ...]] = {}

    def own_space(i: int) -> tuple[int, ...]:
        # per execute point, the space of the preload point commit() starts i at: its
        # windows wait beside it before i starts, and later windows only shrink it
        if i not in own:
            own[i] = tuple(front[_fastest(memo, ops[i], e, stretch)].space
                           for e, front in enumerate(ops[i].preloads))
        return own[i]

    def commit(i: int, h: int) -> None:
        _, ex[i], preload_choices, _ = tried[h]
        if i in pc:     # i's execute point is fixed: its windows start at its fastest preload
            pc[i] = _fastest(memo, ops[i], ex[i], stretch)
        for j, c in zip(early[i] + order[m[i]:h], preload_choices):
            pc[j] = c
        tried.clear()
        scan[0] = None

    def preload_time(j: int) -> float:
        return _load_price(stretch)(ops[j].preloads[ex[j]][pc[j]])

    res = inductive_schedule(n, order, window_time, preload_time, commit)
    source = "inductive" if stretch is None else f"inductive, preloads x{stretch:.2f}"
    return Draft([e + o for e, o in zip(ex, offset)], [pc.get(i, -1) for i in range(n)], order,
                 list(res.horizon), source)


class _Node:
    """A window of the memo's trie (:func:`inductive_draft`): its trajectory, and the windows
    one member larger by that member's (key, execute point, preload point)."""

    __slots__ = ("shrinker", "children")

    def __init__(self, shrinker: WindowShrinker) -> None:
        self.shrinker = shrinker
        self.children: dict[tuple, _Node] = {}


def _load_price(stretch: float | None) -> Callable[[PreloadPoint], float]:
    """The recurrence's preload time ``D_j`` of a preload point (Elk §4.2: the HBM roofline or
    the interconnect delivery, whichever is longer), the delivery taking ``stretch`` times its
    time alone when contention is priced on the preloads."""
    if stretch is None:
        return lambda p: p.load_s
    return lambda p: max(p.load_s, p.network_s * stretch)


def _fastest(memo: dict, op: OpTradeoffs, e: int, stretch: float | None) -> int:
    """:func:`fastest_preload` of ``op``'s preload front at execute point ``e``, kept in the
    search's ``memo`` by the operator's key (equal keys: identical trade-off points,
    :class:`~tvm_icca.elk.tradeoffs.OpTradeoffs`): every draft of a search asks it again for
    every operator."""
    item = ("fastest", op.key, e, stretch)
    c = memo.get(item)
    if c is None:
        c = memo[item] = fastest_preload(op.preloads[e], _load_price(stretch))
    return c


def _joint_starts(ops: Sequence[OpTradeoffs], stretch: float | None = None,
                  memo: dict | None = None) -> tuple[list[OpTradeoffs], list[int]]:
    """Each operator's fastest plan over its three trade-offs together (Elk §4.3 starts every
    operator at its fastest plan): the execute point with the least execution time plus the
    distribution and preload time (:func:`_load_price` of ``stretch``) of its fastest
    preload point. An execute point is chosen in the operator's own window, but it also
    fixes the preload-state front its earlier windows trade off: a faster point whose shared inputs must be broadcast to more
    cores can need twice the link time to preload (or a long distribution) for a 5% faster
    execution. The larger execute points before the fastest plan are slower and larger, so
    they are dropped from the front the allocation shrinks along; returns the trimmed
    operators (keys marked, for the window memo) and how many points each lost. With the
    search's ``memo``, each operator's start is found once per key and pricing, not once per
    draft."""
    price = _load_price(stretch)
    out, offset = [], []
    for op in ops:
        if not op.loads:
            out.append(op)
            offset.append(0)
            continue
        item = ("joint start", op.key, stretch)
        e0 = memo.get(item) if memo is not None else None
        if e0 is None:

            def joint(e: int, op: OpTradeoffs = op) -> float:
                front = op.preloads[e]
                c = fastest_preload(front, price)
                return op.execs[e].time_s + front[c].distribute_s + price(front[c])

            e0 = min(range(len(op.execs)), key=lambda e: (joint(e), e))
            if memo is not None:
                memo[item] = e0
        out.append(op if e0 == 0 else replace(op, key=f"{op.key}@{e0}", execs=op.execs[e0:],
                                              preloads=op.preloads[e0:]))
        offset.append(e0)
    return out, offset


def fastest_preload(front: Sequence[PreloadPoint],
                    price: Callable[[PreloadPoint], float] | None = None) -> int:
    """The preload-state point an operator's windows start from (Elk §4.3 starts every
    operator at its fastest plan): the least load plus distribution time alone, the larger
    point on ties. Both are on the operator's path: its load in the one preload queue (§4.2:
    the HBM roofline or the interconnect delivery, whichever is longer), its distribution
    before it executes. MaxPreload is not always that point: an input every chip needs in
    full is read once per chip at MaxPreload, and an input from the host link (8 GB/s a
    chip) takes 3x longer that way than chunked over the chips and redistributed on chip."""
    price = price or _load_price(None)
    return min(range(len(front)), key=lambda c: (price(front[c]) + front[c].distribute_s, c))


#: Longest average stretch of a preload's delivery considered (a link share of 5%).
MAX_STRETCH = 20.0


def average_stretch(ops: Sequence[OpTradeoffs]) -> float:
    """How much longer a preload's network delivery takes beside the executions, on average:
    ``1 / (1 - traffic / time)`` over the model's fastest execute points (the share of link
    time the executions leave, :func:`runtime_sim.machine.stream_timing.preload_link_share`)."""
    time_s = sum(op.execs[0].time_s for op in ops)
    traffic_s = sum(op.execs[0].traffic_s for op in ops)
    share = preload_link_share(traffic_s, time_s)
    return min(MAX_STRETCH, 1.0 / share) if share > 0 else MAX_STRETCH
