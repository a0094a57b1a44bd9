"""Preload order permutation (Elk §4.4): candidate orders and the layer structure they use.

Pruning, as in the paper:

* only HBM-heavy operators are reordered: ``hbm_bytes`` above the model's average per operator.
  Each heavy operator forms a *group* with the light operators executed before it (after the
  previous heavy one); groups move as a whole, so light operators are preloaded in execution order
  around the heavy ones. Loading operators after a layer's last heavy one stay at its end.
* an LLM is prologue + L identical layers + epilogue (found from the key sequence,
  :func:`detect_layers`); the order is chosen for one layer and applied to every identical layer,
  prologue and epilogue stay in execution order.
* each group moves at most ``max_shift`` (4) group slots; displacement is reported in those slots.

Candidates are generated backwards from the last slot (the paper's suffix tree, Fig. 14): placing
group g at slot s means every unplaced group executed after g is preloaded before g and stays
resident while g executes, so the branch is kept only if their smallest preload spaces plus g's
smallest execution space and live bytes fit in SRAM (a necessary condition; the scheduler rejects
orders that still do not fit). The identity order is not a candidate (it is Elk-Dyn's).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tvm_icca.elk.periods import Repeats, find_repeats
from tvm_icca.elk.tradeoffs import ElkMachine, OpTradeoffs

#: The layer structure of a run: prefix, ``count`` identical layers, epilogue
#: (:class:`tvm_icca.elk.periods.Repeats`).
LayerStructure = Repeats


def detect_layers(keys: Sequence[str]) -> LayerStructure | None:
    """The repeated block covering the most operators (ties: the shortest period, then the
    earliest start), or None: :func:`tvm_icca.elk.periods.find_repeats` (kept per key
    sequence, as the designs ask again for the same operators at each stage)."""
    return find_repeats(keys)


def heavy_ops(ops: Sequence[OpTradeoffs]) -> list[bool]:
    """Whether each operator is HBM-heavy: hbm_bytes above the model's average per operator."""
    mean = sum(o.hbm_bytes for o in ops) / max(len(ops), 1)
    return [o.loads and o.hbm_bytes > mean for o in ops]


@dataclass(frozen=True)
class LayerGroups:
    """One layer's loading operators (relative indices) split into movable groups and a fixed tail."""

    groups: tuple[tuple[int, ...], ...]
    tail: tuple[int, ...]


def layer_groups(ops: Sequence[OpTradeoffs], layers: LayerStructure) -> LayerGroups:
    """Groups of the first repeated layer: each heavy op with the loading light ops before it."""
    heavy = heavy_ops(ops)
    groups: list[tuple[int, ...]] = []
    cur: list[int] = []
    for r in range(layers.period):
        i = layers.start + r
        if ops[i].loads:
            cur.append(r)
        if heavy[i]:
            groups.append(tuple(cur))
            cur = []
    return LayerGroups(tuple(groups), tuple(cur))


def candidate_orders(ops: Sequence[OpTradeoffs], machine: ElkMachine, layers: LayerStructure,
                     groups: LayerGroups, max_shift: int = 4,
                     max_orders: int = 256) -> list[tuple[int, ...]]:
    """Group permutations (slot -> group) other than the identity, from the suffix tree."""
    n_groups = len(groups.groups)
    if n_groups < 2:
        return []
    base = layers.start

    def min_pre(r: int) -> int:
        return min(p[-1].space for p in ops[base + r].preloads)

    pre_bytes = [sum(min_pre(r) for r in g) for g in groups.groups]
    exec_min = []
    for g in groups.groups:
        heavy_op = ops[base + g[-1]]
        exec_min.append(heavy_op.execs[-1].space + heavy_op.live_bytes)
    out: list[tuple[int, ...]] = []
    slots = [-1] * n_groups

    def grow(s: int, unplaced: list[int]) -> Iterator[None]:
        if s < 0:
            yield None
            return
        for g in sorted(unplaced, key=lambda u: (abs(u - s), u)):   # near the identity first
            if abs(g - s) > max_shift:
                continue
            resident = sum(pre_bytes[u] for u in unplaced if u > g)
            if resident + exec_min[g] > machine.sram_bytes:
                continue
            # groups left for slots < s must still reach them within max_shift
            rest = [u for u in unplaced if u != g]
            if any(u - (s - 1) > max_shift for u in rest):
                continue
            slots[s] = g
            yield from grow(s - 1, rest)

    for _ in grow(n_groups - 1, list(range(n_groups))):
        perm = tuple(slots)
        if perm != tuple(range(n_groups)):
            out.append(perm)
            if len(out) >= max_orders:
                break
    return out


def layer_displacement(perm: Sequence[int]) -> float:
    """Average slots a group moved (the paper reports 2.9 on average)."""
    return sum(abs(s - g) for s, g in enumerate(perm)) / max(len(perm), 1)


def build_order(ops: Sequence[OpTradeoffs], layers: LayerStructure | None, groups: LayerGroups | None,
                perm: Sequence[int] | None, n_layers: int | None = None) -> tuple[int, ...]:
    """The full preload order: prologue and epilogue in order, every layer permuted by ``perm``.

    ``n_layers`` < ``layers.count`` builds the order of a model truncated to that many layers
    (:func:`truncate`)."""
    if layers is None or groups is None or perm is None:
        return tuple(i for i, o in enumerate(ops) if o.loads)
    count = layers.count if n_layers is None else n_layers
    end = layers.start + layers.period * count
    order = [i for i in range(layers.start) if ops[i].loads]
    for layer in range(count):
        base = layers.start + layer * layers.period
        for g in perm:
            order.extend(base + r for r in groups.groups[g])
        order.extend(base + r for r in groups.tail)
    order.extend(i for i in range(end, len(ops)) if ops[i].loads)
    return tuple(order)


def truncate(ops: Sequence[OpTradeoffs], layers: LayerStructure, n_layers: int) -> list[OpTradeoffs]:
    """Prologue + the first ``n_layers`` layers + epilogue: the model candidates are screened on."""
    keep = layers.start + layers.period * n_layers
    return list(ops[:keep]) + list(ops[layers.end:])


def order_displacement(order: Sequence[int]) -> float:
    """Average |preload position - rank in execution order| over all preloading operators."""
    ranked = sorted(order)
    rank = {op: k for k, op in enumerate(ranked)}
    return sum(abs(k - rank[op]) for k, op in enumerate(order)) / max(len(order), 1)
