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
planned by :class:`~tvm_icca.planning.plan_cache.PlanCache`'s search under the same cost
model, and the candidate with the least estimated time for all its pieces wins (fewer pieces
on a tie: each piece costs a synchronization and a launch).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.expr import TensorExpr, tensor_bytes
from runtime_sim.contract.hardware import HardwareSpec
from tvm_icca.lower.region import RegionOps
from tvm_icca.split.pieces import split_blocks, split_dims, sub_expression, why_not_splittable
from tvm_icca.split.region_split import SplitChoice

#: Share of a core's usable SRAM a piece's tensors may fill when perfectly spread. A plan
#: needs more than the perfect spread (partitions are padded to the grid; replicas of a
#: sub-tensor, T10 §4.2) and the region holds earlier outputs beside it
#: (:func:`~tvm_icca.planning.region_plans.region_budgets`): half leaves room for both.
PIECE_FILL = 0.5
#: Share of the usable SRAM above which an operator that reads HBM is split although it
#: fits: Elk preloads an operator's inputs while the operator before it executes, into SRAM
#: the executing operator leaves free (Elk §4.2-4.3); an operator filling more than half the
#: SRAM can neither be preloaded beside its predecessor nor leave room for its successor's
#: preload, so its HBM reads serialize with execution. Its pieces overlap one another's reads.
OVERLAP_SHARE = 0.5
#: Piece counts tried per axis: the smallest that fits, and this many doublings of it.
DOUBLINGS = 2

#: Plans one piece: ``(expression, budget bytes per core, name) -> estimated seconds``,
#: raising :class:`PlanNotFoundError` when it has no plan.
PlanPiece = Callable[[TensorExpr, int, str], float]


def spread_bytes_per_core(expr: TensorExpr, num_cores: int) -> float:
    """Bytes per core of all the operator's tensors spread perfectly over the cores: the
    least any plan of it holds (a viewed input counts its block)."""
    total = sum(tensor_bytes(expr.access_shape(t), a.dtype) for t, a in enumerate(expr.tensors))
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
                  key=lambda t: tensor_bytes(expr.access_shape(t), expr.tensors[t].dtype))
    access = expr.tensors[largest]
    return [a.name for a in expr.axes
            if a.extent > 1 and split_dims(access, a.name) and why_not_splittable(expr, a.name) is None]


def choose_splits(region: RegionOps, hw: HardwareSpec, plan_piece: PlanPiece,
                  forced: Mapping[int, int] = {},
                  hbm_names: frozenset[str] = frozenset()) -> list[SplitChoice]:
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

    Returns
    -------
    list of SplitChoice
        One choice per operator to split, in region order; operators with no axis that can
        be cut, or no candidate with a plan, are left out.
    """
    choices = []
    produced = {op.output_name for op in region.ops}
    for i, op in enumerate(region.ops):
        at_least = forced.get(i, 0)
        preloaded = any(n in hbm_names for n in op.input_names)
        if not at_least and not needs_split(op.expr, hw, preloaded):
            continue
        offchip = {t: _read_rate(hw, n in hbm_names) for t, n in enumerate(op.input_names)
                   if n not in produced}
        choice = best_split(op.expr, hw, plan_piece, op.describe(), i, max(at_least, 2), offchip)
        if choice is not None:
            choices.append(choice)
    return choices


def best_split(expr: TensorExpr, hw: HardwareSpec, plan_piece: PlanPiece, name: str, index: int,
               at_least: int = 2, offchip: Mapping[int, float] = {}) -> SplitChoice | None:
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

    Returns
    -------
    SplitChoice or None
        The candidate with the least estimated time (fewer pieces on a tie); ``None`` when no
        axis can be cut or no candidate has a plan.
    """
    budget = int(hw.usable_sram_bytes * PIECE_FILL)
    fewest = max(at_least, math.ceil(spread_bytes_per_core(expr, hw.num_cores) / budget))
    best: SplitChoice | None = None
    for axis in split_axes(expr):
        extent = expr.extent(axis)
        for pieces in _candidates(extent, fewest):
            start, length = split_blocks(extent, pieces)[0]
            piece = sub_expression(expr, axis, start, length, expr.output.name)
            try:
                seconds = plan_piece(piece, budget, f"{name} (part 1/{pieces})")
            except PlanNotFoundError:
                continue
            reads = sum(tensor_bytes(piece.access_shape(t), piece.inputs[t].dtype) / rate
                        for t, rate in offchip.items())
            total = (seconds + reads) * pieces
            if best is None or total < best.estimated_time_s * (1 - 1e-9):
                best = SplitChoice(index, axis, pieces, total)
    return best


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
