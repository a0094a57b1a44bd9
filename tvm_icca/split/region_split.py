"""Rewrite a region's operator list so that chosen operators run as sub-operators.

:func:`split_region` takes the choices of :mod:`tvm_icca.split.split_choice` (operator, axis,
number of pieces) and returns the region with each chosen operator replaced by its pieces
(:func:`~tvm_icca.split.pieces.sub_expression`). A split does not stop at its operator: a
reader of the pieces whose own axis runs along the split dimension is split the same way and
reads the pieces one by one (a chain such as attention's scores, maximum, exponent, sum and
``P V`` is cut along the context once), so pieces are joined only where they must be:

* a causal attention cut along its queries gives each piece only the keys its rows see
  (:mod:`~tvm_icca.split.visible_keys`): the blocks its mask hides are never computed;
* a reader that splits along one of its reductions writes partial results, joined by a
  combine operator (:func:`~tvm_icca.split.pieces.combine_expression`); a fused attention
  split along its keys runs per key block and is joined by the online-softmax combine
  (:mod:`~tvm_icca.split.attention_keys`);
* a reader that cannot take pieces (the split dimension is core-local to it, read through a
  compound index, or it would re-read a large off-chip tensor once per piece), and a region
  output kept on chip, read the pieces joined by a concat operator
  (:func:`~tvm_icca.split.pieces.concat_expression`);
* a region output only the host reads is joined by the host
  (:class:`~runtime_sim.contract.program.HostJoin`): each piece leaves the chip as it is
  produced, and the joined tensor never has to fit on the chip (a 32K-token training
  forward's logits, ``[32768, 32000]`` in float16, are 2.1 GB).

The new list runs each chain piece by piece (all operators of piece 0, then of piece 1, ...)
where the dependencies allow: a piece's intermediates are dead before the next piece starts,
which is what lets a chain too large for the chip (prefill attention's scores) run on it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from typing import Sequence

from runtime_sim.contract.program import HostJoin
from tvm_icca.lower.region import PendingOp, RegionOps
from tvm_icca.split.attention_keys import attention_key_blocks, key_axis
from tvm_icca.split.online_softmax import online_softmax
from tvm_icca.split.pieces import (
    combine_expression,
    concat_expression,
    piece_inputs_of,
    split_blocks,
    split_dims,
    sub_expression,
    why_not_splittable,
)
from tvm_icca.split.visible_keys import trim_to_visible_keys


#: Pieces one concat operator joins: a concat holds, per core, one block of the output per
#: input beside the output's own (its piecewise reads are partitioned like the output), so
#: many pieces are joined by a tree of concats.
JOIN_FAN_IN = 4


@dataclass(frozen=True)
class SplitChoice:
    """Operator ``op`` (its index in the region) runs as ``pieces`` sub-operators along
    ``axis``; ``estimated_time_s`` is what the choice was expected to take (reports).

    ``follow_always``: readers of the pieces follow the split even when each piece re-reads
    an off-chip tensor the split does not cut (a split made to relieve the SRAM the region's
    intermediates hold, :func:`~tvm_icca.split.split_choice.pressure_root`: joining them
    again would hold what the split was for)."""

    op: int
    axis: str
    pieces: int
    estimated_time_s: float = 0.0
    follow_always: bool = False


@dataclass(frozen=True)
class _Pieces:
    """A tensor that exists as pieces along dimension ``dim``."""

    dim: int
    blocks: tuple[tuple[int, int], ...]
    names: tuple[str, ...]
    chain: int  # the index of the operator whose split started the chain
    follow_always: bool = False  # the chain's SplitChoice.follow_always


def piece_name(name: str, k: int) -> str:
    """The name of piece ``k`` of operator or tensor ``name``."""
    return f"{name}.p{k}"


def is_join(name: str) -> bool:
    """Whether operator ``name`` joins pieces (a concat or a combine)."""
    return ".combine" in name or ".concat" in name


def original_operator(name: str) -> str:
    """The operator of the unsplit region a (sub-, combine, concat or online-softmax)
    operator comes from."""
    for suffix in (".combine", ".concat", ".online"):
        if suffix in name:
            return name[: name.index(suffix)]
    head, _, tail = name.rpartition(".p")
    return head if head and tail.isdigit() else name


def split_region(region: RegionOps, choices: Sequence[SplitChoice]) -> RegionOps:
    """``region`` with the chosen operators split (see the module docstring).

    Parameters
    ----------
    region : RegionOps
        The region's operators as lowered.
    choices : sequence of SplitChoice
        The operators to split, from :func:`~tvm_icca.split.split_choice.choose_splits`.

    Returns
    -------
    RegionOps
        The same region (inputs, outputs, constants) whose operator list has the pieces,
        their combines and concats, and the readers of the pieces cut alike, in dependency
        order, piece by piece where the dependencies allow.
    """
    if not choices:
        return region
    chosen = {c.op: c for c in choices}
    offchip = {d.name for d in region.inputs} | set(region.constants)
    pieced: dict[str, _Pieces] = {}
    joined: set[str] = set()
    out: list[tuple[tuple, PendingOp]] = []

    def join(name: str, before: int) -> None:
        if name in joined:
            return
        p = pieced[name]
        at, src = next((i, op) for i, op in enumerate(region.ops) if op.output_name == name)
        parts = [(n, s, length) for n, (s, length) in zip(p.names, p.blocks)]
        level = 0
        while len(parts) > 1:  # a tree of concats: each reads at most JOIN_FAN_IN pieces
            groups = [parts[g:g + JOIN_FAN_IN] for g in range(0, len(parts), JOIN_FAN_IN)]
            last = len(groups) == 1
            parts = []
            for g, group in enumerate(groups):
                # a chain cut for the region's memory joins each group as soon as its last
                # piece exists: the concat holds the group in its own (spread) layout rather
                # than each piece staying on the cores its plan wrote it to
                done = min((g + 1) * JOIN_FAN_IN ** (level + 1), len(p.blocks)) - 1
                key = ((p.chain, done, at, 1 + level) if p.follow_always
                       else (before, -1, before, -1 - level))
                start = group[0][1]
                length = sum(n for _, _, n in group)
                shape = tuple(length if d == p.dim else n for d, n in enumerate(src.expr.output.shape))
                tag = "" if last else f".j{level}.{g}"
                target = replace(src.expr.output, name=name + tag, shape=shape)
                expr = concat_expression(target, p.dim, [(n, s - start, k) for n, s, k in group])
                out.append((key, PendingOp(
                    f"{src.name}.concat{tag}", expr, tuple(n for n, _, _ in group), name + tag,
                    _label(src, "joined"))))
                parts.append((name + tag, start, length))
            level += 1
        joined.add(name)

    readers: dict[str, list[int]] = {}
    for j, op in enumerate(region.ops):
        for name in set(op.input_names):
            readers.setdefault(name, []).append(j)
    replaced: set[int] = set()  # readers whose output an online softmax computes
    for j, op in enumerate(region.ops):
        if j in replaced:
            continue
        reads = [t for t, n in enumerate(op.input_names) if n in pieced and n not in joined]
        # a reader of pieces follows their split when it can; a chosen operator also needs
        # at least as many pieces as it was chosen with
        plan = _follow(op, reads, pieced, offchip) if reads else None
        if plan is None and reads:
            online = _online_softmax(region, j, reads, pieced, readers)
            if online is not None:
                reader, chain, items = online
                out += items
                replaced.add(reader)
                continue
        if j in chosen and (plan is None or len(plan[1]) < chosen[j].pieces):
            c = chosen[j]
            for t in reads:
                join(op.input_names[t], j)
            plan = (c.axis, split_blocks(op.expr.extent(c.axis), c.pieces), {}, j, c.follow_always)
        elif reads and plan is None:
            for t in reads:
                join(op.input_names[t], j)
        if plan is None:
            out.append(((j, -1, j, 0), op))
            continue
        axis, blocks, piece_inputs, chain, follow_always = plan
        if key_axis(op.expr) == axis:  # attention per key block, the online combine after
            out += [((chain, k, j, 3 * which + sub), item) for (k, which, sub), item
                    in attention_key_blocks(op, blocks, piece_inputs)]
            continue
        reduce = any(a.name == axis and a.reduce for a in op.expr.axes)
        kept = list(piece_inputs_of(op.expr, axis))
        names = []
        for k, (start, length) in enumerate(blocks):
            out_name = piece_name(op.output_name, k)
            # a causal attention's query piece reads only the keys its rows see
            expr = trim_to_visible_keys(sub_expression(op.expr, axis, start, length, out_name,
                                                       {t: ns[k] for t, ns in piece_inputs.items()}))
            inputs = tuple(piece_inputs[t][k] if t in piece_inputs else op.input_names[t] for t in kept)
            out.append(((chain, k, j, 0), PendingOp(piece_name(op.name, k), expr, inputs, out_name,
                                                    _label(op, f"part {k + 1}/{len(blocks)}"))))
            names.append(out_name)
        if reduce:
            combine = combine_expression(op.expr, names)
            extra = tuple(op.input_names[t] for t in op.expr.epilogue_inputs if op.expr.epilogue is not None)
            out.append(((chain, len(blocks), j, 0),
                        PendingOp(f"{op.name}.combine", combine, tuple(names) + extra, op.output_name,
                                  _label(op, f"{len(blocks)} partials combined"))))
        else:
            dim = (split_dims(op.expr.output, axis) or (None,))[0]
            pieced[op.output_name] = _Pieces(dim, blocks, tuple(names), chain, follow_always)
    host_joins = dict(region.host_joins)
    for name in region.outputs:
        if name not in pieced or name in joined:
            continue
        p = pieced[name]
        if name in region.host_outputs and p.dim is not None:
            # only the host reads it: its pieces leave as they are produced, the host joins them
            host_joins[name] = HostJoin(p.dim, p.names)
        else:
            join(name, len(region.ops))
    return replace(region, ops=tuple(_in_dependency_order(out)), host_joins=host_joins)


def _follow(op: PendingOp, reads: list[int], pieced: dict[str, _Pieces], offchip: set[str]):
    """How ``op`` splits to read the pieces it reads one by one, or ``None`` if it cannot:
    ``(axis, blocks, {input: piece names}, chain, follow_always)``."""
    axis, first = None, None
    for t in reads:
        p = pieced[op.input_names[t]]
        index = op.expr.inputs[t].indices[p.dim]
        if not index.is_simple or (axis is not None and index.terms[0][0] != axis):
            return None
        if first is not None and p.blocks != first.blocks:
            return None
        axis, first = index.terms[0][0], p
        if op.expr.inputs[t].view is not None or op.expr.extent(axis) != sum(n for _, n in p.blocks):
            return None
    if why_not_splittable(op.expr, axis) is not None or key_axis(op.expr) == axis:
        return None  # an attention reads pieces of its keys joined (split_axes: keys last)
    # reading an off-chip tensor the split does not cut once per piece costs (pieces - 1)
    # extra reads of it: worth it only while that is less than joining the pieces, unless
    # the joined tensor is what the chip has no room for
    always = all(pieced[op.input_names[t]].follow_always for t in reads)
    whole = sum(op.expr.read_bytes(t) for t, a in enumerate(op.expr.inputs)
                if op.input_names[t] in offchip and not split_dims(a, axis))
    joined = sum(op.expr.read_bytes(t) for t in reads)
    if not always and whole * (len(first.blocks) - 1) > joined:
        return None
    return (axis, first.blocks, {t: pieced[op.input_names[t]].names for t in reads},
            first.chain, always)


def _online_softmax(region: RegionOps, j: int, reads: list[int], pieced: dict[str, _Pieces],
                    readers: dict[str, list[int]]):
    """Softmax ``j`` over score pieces cut along its row, and its one reader ``P V``, as
    per-block statistics and partial products plus the online-softmax combine
    (:mod:`.online_softmax`): ``(reader index, chain, keyed operators)``, or ``None``."""
    op = region.ops[j]
    if len(reads) != 1 or op.output_name in region.outputs:
        return None
    p = pieced[op.input_names[reads[0]]]
    if p.dim != len(op.expr.inputs[reads[0]].shape) - 1 or len(readers.get(op.output_name, ())) != 1:
        return None
    jp = readers[op.output_name][0]
    pv = region.ops[jp]
    values: dict[int, tuple[int, tuple[str, ...]]] = {}
    for t, name in enumerate(pv.input_names):
        if name in pieced and name != op.output_name:
            other = pieced[name]
            if other.blocks != p.blocks:
                return None
            values[t] = (other.dim, other.names)
    online = online_softmax(op, pv, p.names, p.blocks, values)
    if online is None:
        return None
    items = [((p.chain, k, (j, jp)[which], sub), item) for (k, which, sub), item in online.ops]
    return jp, p.chain, items


def _label(op: PendingOp, what: str) -> str:
    return f"{op.label or op.expr.kind} ({what})"


def _in_dependency_order(items: list[tuple[tuple, PendingOp]]) -> list[PendingOp]:
    """The operators in dependency order, smallest key first among those ready: the keys
    ``(chain, piece, op, sub)`` put each piece of a chain before the next piece."""
    producer = {op.output_name: i for i, (_, op) in enumerate(items)}
    waiting = [0] * len(items)
    readers: list[list[int]] = [[] for _ in items]
    for i, (_, op) in enumerate(items):
        for name in set(op.input_names):
            if name in producer:
                waiting[i] += 1
                readers[producer[name]].append(i)
    ready = [(key, i) for i, (key, _) in enumerate(items) if not waiting[i]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(items[i][1])
        for r in readers[i]:
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, (items[r][0], r))
    assert len(order) == len(items), "split rewrite made a cycle"
    return order

