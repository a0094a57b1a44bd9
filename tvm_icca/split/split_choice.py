"""Which operators to split, along which axis, into how many pieces.

An rTensor plan keeps every tensor of an operator on the cores at once (T10 §4.2: each core
holds one partition of each), so an operator whose tensors add up to more than the chip's
SRAM has no plan at all (Elk §2.2 executes each operator from on-chip memory). Such an
operator -- a long KV cache read by decode attention, prefill's ``seq x seq`` scores -- is
split into sub-operators that each fit (:mod:`tvm_icca.split.region_split`).

:func:`choose_splits` picks the operators whose tensors cannot fit even perfectly spread
(or that the planner reported unplannable, ``forced``), and those that read HBM and fill so
much of the SRAM that Elk cannot preload beside them (:data:`OVERLAP_SHARE`), and for each searches the axis and
the number of pieces with the plan search itself: every candidate's first (largest) piece is
planned by :class:`~tvm_icca.model_pass.plan_cache.PlanCache`'s search under the same cost
model, and the candidate with the least estimated time for all its pieces wins (fewer pieces
on a tie: each piece costs a synchronization and a launch).

An operator can also fail to plan because the intermediates its region holds beside it fill
the SRAM (a 32K-token prompt's MLP holds the ``[32K, 13824]`` gate output while the up
projection runs). Cutting that operator finer does not help; :func:`pressure_root` finds the
operator to cut instead: the producer of the largest tensor held, or, where that producer
and the failed operator read a common tensor, that tensor's producer, so that the whole chain
follows one split and runs piece by piece (the chunked prefill of serving systems).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.lifetimes import last_reads, outlives
from tvm_icca.lower.region import RegionOps
from tvm_icca.split.attention_keys import key_axis
from tvm_icca.split.pieces import (
    piece_inputs_of,
    split_blocks,
    split_dims,
    sub_expression,
    why_not_splittable,
)
from tvm_icca.split.region_split import SplitChoice
from tvm_icca.split.visible_keys import query_axis, trim_to_visible_keys

#: Share of a core's usable SRAM a piece's tensors may fill when perfectly spread. A plan
#: needs more than the perfect spread (partitions are padded to the grid; replicas of a
#: sub-tensor, T10 §4.2) and the region holds earlier outputs beside it
#: (:func:`~tvm_icca.model_pass.region_plans.region_budgets`): half leaves room for both.
PIECE_FILL = 0.5
#: Share of the usable SRAM above which an operator that reads HBM is split although it
#: fits: Elk preloads an operator's inputs while the operator before it executes, into SRAM
#: the executing operator leaves free (Elk §4.2-4.3); an operator filling more than half the
#: SRAM can neither be preloaded beside its predecessor nor leave room for its successor's
#: preload, so its HBM reads serialize with execution. Its pieces overlap one another's reads.
OVERLAP_SHARE = 0.5
#: Piece counts tried per axis: the smallest that fits, and this many doublings of it.
DOUBLINGS = 2
#: The least estimated gain for which a causal attention that fits is cut into query pieces
#: (:func:`causal_split`): each piece adds a launch, a synchronization and re-layouts the
#: estimate of one operator does not see, so a cut must win by more than the estimates'
#: spread against the timing simulator (a few percent, tests/test_plan_search.py).
CAUSAL_GAIN = 0.05

#: Plans one piece: ``(expression, budget bytes per core, name[, arriving]) -> estimated
#: seconds``, raising :class:`PlanNotFoundError` when it has no plan; ``arriving``: indices
#: of inputs an earlier operator of the region produced, whose arrival the search prices
#: (:func:`tvm_icca.plan_search.plan_operator`) and the seconds include, over the cores'
#: links and across chips (:func:`tvm_icca.plan_search.mapping.arrival_seconds`).
PlanPiece = Callable[..., float]


def spread_bytes_per_core(expr: TensorExpr, num_cores: int) -> float:
    """Bytes per core of all the operator's tensors spread perfectly over the cores: the
    least any plan of it holds (a viewed input counts its block)."""
    total = sum(expr.read_bytes(t) for t in range(len(expr.tensors)))
    return total / num_cores


def needs_split(expr: TensorExpr, hw: HardwareSpec, preloaded: bool = False) -> bool:
    """Whether the operator cannot fit the chip even with its tensors perfectly spread, or,
    when it is ``preloaded`` (reads HBM), fills more than :data:`OVERLAP_SHARE` of it."""
    share = OVERLAP_SHARE if preloaded else 1.0
    return spread_bytes_per_core(expr, hw.num_cores) > hw.usable_sram_bytes * share


def split_axes(expr: TensorExpr) -> list[str]:
    """Axes the operator can be cut along that cut its largest tensor (cutting another axis
    leaves the tensor that does not fit whole)."""
    largest = max(range(len(expr.tensors)),
                  key=expr.read_bytes)
    access = expr.tensors[largest]
    axes = [a.name for a in expr.axes
            if a.extent > 1 and split_dims(access, a.name) and why_not_splittable(expr, a.name) is None]
    # a fused attention cut along its keys recomputes each block's scores for its statistics
    # (tvm_icca.split.attention_keys): only when nothing else cuts the tensor (a decode step's cache)
    keys = key_axis(expr)
    return [a for a in axes if a != keys] or axes


def choose_splits(region: RegionOps, hw: HardwareSpec, plan_piece: PlanPiece,
                  forced: Mapping[int, int] = {},
                  hbm_names: frozenset[str] = frozenset(),
                  pressure: Mapping[int, tuple[str, int]] = {}) -> list[SplitChoice]:
    """The operators of ``region`` to split and how (see the module docstring).

    Parameters
    ----------
    region : RegionOps
        The region's operators as lowered, before planning.
    hw : HardwareSpec
        The chip.
    plan_piece : PlanPiece
        Plans one piece within a budget and returns its estimated seconds (the planner's
        search and cost model); raises :class:`PlanNotFoundError` when it has no plan.
    forced : Mapping[int, int]
        Operators the planner found no plan for (their index) and the least number of pieces
        to try; the others are split when :func:`needs_split`.
    hbm_names : frozenset of str
        The region tensors read from HBM: their readers are preloaded.
    pressure : Mapping[int, tuple[str, int]]
        Operators to cut to relieve the SRAM their region's intermediates hold
        (:func:`pressure_root`): index -> (axis, pieces), taken as given; their readers
        follow the split (``SplitChoice.follow_always``).

    Returns
    -------
    list of SplitChoice
        One choice per operator to split, in region order; operators with no axis that can
        be cut, or no candidate with a plan, are left out.
    """
    choices = []
    produced = {op.output_name for op in region.ops}
    for i, op in enumerate(region.ops):
        if i in pressure:
            axis, pieces = pressure[i]
            choices.append(SplitChoice(i, axis, pieces, follow_always=True))
            continue
        at_least = forced.get(i, 0)
        preloaded = any(n in hbm_names for n in op.input_names)
        offchip = {t: _read_rate(hw, n in hbm_names) for t, n in enumerate(op.input_names)
                   if n not in produced}
        arriving = tuple(t for t, n in enumerate(op.input_names) if n in produced)
        if not at_least and not needs_split(op.expr, hw, preloaded):
            choice = causal_split(op.expr, hw, plan_piece, op.describe(), i, offchip, arriving)
        else:
            choice = best_split(op.expr, hw, plan_piece, op.describe(), i, max(at_least, 2), offchip,
                                arriving=arriving)
        if choice is not None:
            choices.append(choice)
    return choices


def causal_split(expr: TensorExpr, hw: HardwareSpec, plan_piece: PlanPiece, name: str, index: int,
                 offchip: Mapping[int, float] = {}, arriving: tuple[int, ...] = ()) -> SplitChoice | None:
    """A fused attention that fits, cut along its queries when its pieces, each over only
    the keys its rows see (:mod:`tvm_icca.split.visible_keys`), are estimated faster than
    the whole operator by :data:`CAUSAL_GAIN`: a causal mask hides about half the scores,
    and piece ``k`` of ``n`` computes ``(k + 1) / n`` of the keys. ``None`` when the
    operator has no such mask or the whole is not slower. Both sides are planned within the
    pieces' budget, with the arrival of their ``arriving`` inputs priced: each piece lays out
    again the keys and values it reads, which the whole operator lays out once."""
    axis = query_axis(expr)
    if axis is None or why_not_splittable(expr, axis) is not None:
        return None
    budget = int(hw.usable_sram_bytes * PIECE_FILL)
    try:
        whole = plan_piece(expr, budget, name, arriving) + _offchip_seconds(expr, list(offchip), offchip)
    except PlanNotFoundError:
        whole = math.inf
    best = best_split(expr, hw, plan_piece, name, index, 2, offchip, axes=(axis,), arriving=arriving)
    if best is None or not best.estimated_time_s < whole * (1 - CAUSAL_GAIN):
        return None
    return best


def best_split(expr: TensorExpr, hw: HardwareSpec, plan_piece: PlanPiece, name: str, index: int,
               at_least: int = 2, offchip: Mapping[int, float] = {},
               axes: Sequence[str] | None = None, arriving: tuple[int, ...] = ()) -> SplitChoice | None:
    """The fastest ``(axis, pieces)`` for one operator by the plan search's estimates.

    Parameters
    ----------
    expr : TensorExpr
        The operator.
    hw : HardwareSpec
        The chip.
    plan_piece : PlanPiece
        Plans one piece (see :func:`choose_splits`).
    name : str
        The operator as messages name it.
    index : int
        Its position in the region (kept in the choice).
    at_least : int
        The fewest pieces to try.
    offchip : Mapping[int, float]
        Inputs read from off the chip and their read rate (bytes per second). Every piece
        reads its own block of each, so an input the axis does not cut is read once per
        piece, and that time is added to the pieces' (a causal mask read by every head's
        piece of prefill attention costs far more than the rows' pieces that cut it).
    axes : sequence of str, optional
        The axes to try (default :func:`split_axes`).
    arriving : tuple of int
        Inputs an earlier operator of the region produced. A causal attention's query pieces
        (:func:`_pieces_seconds`) are planned with their arrival priced.

    Returns
    -------
    SplitChoice or None
        The candidate with the least estimated time (fewer pieces on a tie); ``None`` when no
        axis can be cut or no candidate has a plan.
    """
    budget = int(hw.usable_sram_bytes * PIECE_FILL)
    fewest = max(at_least, math.ceil(spread_bytes_per_core(expr, hw.num_cores) / budget))
    best: SplitChoice | None = None
    for axis in split_axes(expr) if axes is None else axes:
        extent = expr.extent(axis)
        position = piece_inputs_of(expr, axis)
        for pieces in _candidates(extent, fewest):
            try:
                total = _pieces_seconds(expr, axis, pieces, plan_piece, budget, name, position, offchip,
                                        arriving)
            except PlanNotFoundError:
                continue
            if best is None or total < best.estimated_time_s * (1 - 1e-9):
                best = SplitChoice(index, axis, pieces, total)
    return best


def _pieces_seconds(expr: TensorExpr, axis: str, pieces: int, plan_piece: PlanPiece, budget: int,
                    name: str, position: Mapping[int, int], offchip: Mapping[int, float],
                    arriving: tuple[int, ...] = ()) -> float:
    """The estimated seconds of ``expr`` cut into ``pieces`` along ``axis``, off-chip reads
    included: the first piece's times the count or, for a causal attention cut along its
    queries (whose later pieces see more keys), the first and the last piece planned and the
    others interpolated on their key counts (a piece's time is near affine in its keys: a
    part per operator and a step per block of keys), the arrival of their ``arriving``
    inputs priced (each piece lays out its keys and values again)."""
    blocks = split_blocks(expr.extent(axis), pieces)
    cut = [sub_expression(expr, axis, s, n, expr.output.name) for s, n in blocks]
    causal = query_axis(expr) == axis
    if causal:
        cut = [trim_to_visible_keys(p) for p in cut]
    # an input only the combine reads (a cut reduction's epilogue) is read once
    read = [t for t in position if t in offchip]
    priced = tuple(position[t] for t in arriving if t in position) if causal else ()

    def seconds(k: int) -> float:
        label = f"{name} (part {k + 1}/{pieces})"
        own = plan_piece(cut[k], budget, label, priced) if priced else plan_piece(cut[k], budget, label)
        return own + _offchip_seconds(cut[k], read, offchip, position)

    keys = key_axis(expr)
    lengths = [p.extent(keys) for p in cut] if keys is not None and keys != axis else []
    if len(set(lengths)) <= 1:
        return seconds(0) * pieces
    first, last = seconds(0), seconds(pieces - 1)
    lo, hi = lengths[0], lengths[-1]
    return sum(first + (last - first) * (n - lo) / (hi - lo) for n in lengths)


def _offchip_seconds(piece: TensorExpr, inputs: Sequence[int], offchip: Mapping[int, float],
                     position: Mapping[int, int] | None = None) -> float:
    """Seconds to read ``piece``'s off-chip ``inputs`` (indices into the operator it was cut
    from; ``position`` maps them to the piece's, default the same) at their read rates."""
    return sum(piece.read_bytes(t if position is None else position[t]) / offchip[t] for t in inputs)


def _read_rate(hw: HardwareSpec, hbm: bool) -> float:
    """Bytes per second the chips read an off-chip input at: HBM, or the host links."""
    if hbm and hw.hbm_bandwidth > 0:
        return float(hw.hbm_bandwidth)
    return float(hw.host_bandwidth) * hw.num_chips


def _candidates(extent: int, fewest: int) -> Sequence[int]:
    """Piece counts to try along an axis of ``extent``: the smallest divisor of the extent
    from ``fewest`` on (equal pieces share one plan), then its doublings, within the extent."""
    if fewest > extent:
        return ()
    first = next((n for n in range(fewest, extent + 1) if extent % n == 0), extent)
    counts = [first]
    for _ in range(DOUBLINGS):
        nxt = next((n for n in range(counts[-1] * 2, extent + 1) if extent % n == 0), None)
        if nxt is None:
            break
        counts.append(nxt)
    return counts


def pressure_root(region: RegionOps, failed: int) -> tuple[int, str] | None:
    """The operator to cut, and its axis, when operator ``failed`` of ``region`` has no plan
    because the intermediates held beside it fill the SRAM; ``None`` if none can be cut.

    The tensors held while ``failed`` runs are those of the one lifetime rule
    (:mod:`runtime_sim.contract.lifetimes`), less the region outputs that stay on chip to its
    end (they are held whole however they are cut). From the largest whose producer can be cut along
    its longest output axis, the walk goes up through the input that axis cuts while that
    input is also read by another operator no later than ``failed`` (a fork such as the norm
    feeding an MLP's gate and up projections): cutting the fork's producer makes both
    branches follow one split, so neither branch's output is held whole beside the other.
    """
    ops = region.ops
    staying = set(region.staying_outputs)
    last = last_reads([op.input_names for op in ops], staying)
    producer = {op.output_name: j for j, op in enumerate(ops)}
    # an output that stays on chip to the region's end is held whole however it is cut
    held = [j for j in range(min(failed, len(ops)))
            if outlives(last, ops[j].output_name, failed) and ops[j].output_name not in staying]
    for j in sorted(held, key=lambda j: -ops[j].expr.output.nbytes):
        axis = _longest_output_axis(ops[j].expr)
        if axis is None:
            continue
        root = (j, axis)
        while (up := _fork_above(region, *root, failed, producer)) is not None:
            root = up
        return root
    return None


def _longest_output_axis(expr: TensorExpr) -> str | None:
    """The longest spatial axis that cuts ``expr``'s output and along which it can be cut."""
    axes = [a for a in expr.axes if not a.reduce and a.extent > 1 and split_dims(expr.output, a.name)
            and why_not_splittable(expr, a.name) is None]
    return max(axes, key=lambda a: a.extent).name if axes else None


def _fork_above(region: RegionOps, op: int, axis: str, failed: int,
                producer: Mapping[str, int]) -> tuple[int, str] | None:
    """The producer of an input of ``op`` cut by ``axis`` that another operator no later
    than ``failed`` reads too, with the axis that cuts the same dimension of its output."""
    expr = region.ops[op].expr
    for t, name in enumerate(region.ops[op].input_names):
        dims = split_dims(expr.inputs[t], axis)
        if not dims or name not in producer:
            continue
        readers = [k for k, o in enumerate(region.ops) if k <= failed and name in o.input_names]
        if len(readers) < 2:
            continue
        q = region.ops[producer[name]].expr
        index = q.output.indices[dims[0]]
        if index.is_simple and why_not_splittable(q, index.terms[0][0]) is None:
            return producer[name], index.terms[0][0]
    return None
