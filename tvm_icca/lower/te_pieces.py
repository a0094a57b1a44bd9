"""Reads through piecewise-affine indices, as guarded reads of affine pieces.

An index built from affine expressions with ``min``, ``max``, ``abs`` and ``select`` /
``if_then_else`` on affine comparisons is affine on each piece of the iteration domain that
its comparisons cut out. Edge padding clamps its index (``max(0, min(W-1, i - b))``, topi's
``replicate_pad``) and reflect padding folds it (``m - |m - |i - b||``, topi's
``reflect_pad``): neither is one affine map (T10 §5), but each is three -- the left border,
the interior, the right border. A read ``x[f(i)]`` is then
``select(g_1, x[f_1(i)], select(g_2, x[f_2(i)], x[f_3(i)]))``, the same *guarded read* a
concat is (:func:`runtime_sim.contract.expr.guarded_inputs`): each piece is an ordinary affine
access whose input box the layout computes as for any other read, and the guards pick the one
that holds. Exact by construction: on every point exactly one piece's guards hold, and there
the piece's index equals ``f``.

:func:`affine_pieces` does the case split; TVM's arithmetic analyzer, which knows every axis's
range, drops the pieces whose guards cannot hold together (and the guards that always hold), so
an axis that is not padded stays one plain access.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Any, Sequence

import tvm
from tvm import tirx

from runtime_sim.contract.errors import UnsupportedOperatorError
from tvm_icca.lower.te_axes import AxisSpace

__all__ = ["MAX_PIECES", "Piece", "affine_pieces"]

#: Most pieces one read may be split into: the left border, the interior and the right
#: border of one padded axis. Every piece is a tensor access of the operator, and the plan
#: search joins the options of its tensors (:mod:`tvm_icca.plan_search.plan_space`): the nine
#: pieces of two padded axes at once exhaust memory there, so such pads are split per axis
#: first (:func:`tvm_icca.frontend.pad_rewrites.per_axis_pads`).
MAX_PIECES = 3


@dataclass(frozen=True)
class Piece:
    """One affine piece of a read: where it applies and the index it reads there."""

    guards: tuple[PrimExpr, ...]  # affine integer expressions over the axes, each >= 0
    index: tuple[PrimExpr, ...]  # an affine index per tensor dimension


PrimExpr = Any  # a TIR integer expression (TVM 0.27 exports no PrimExpr class to annotate with)
_Case = tuple[tuple[PrimExpr, ...], PrimExpr]  # (guards, affine value)


def affine_pieces(space: AxisSpace, index: Sequence[PrimExpr]) -> list[Piece] | None:
    """The pieces of a read at ``index`` (integer expressions over ``space``'s axes), or
    ``None`` when some dimension is not piecewise affine or needs more than
    :data:`MAX_PIECES` pieces.

    The guards of the pieces partition the iteration domain: the last piece's guards are
    the complement of the others', so a nested select may leave them implicit.
    """
    try:
        per_dim = [_cases(space, e) for e in index]
    except UnsupportedOperatorError:
        return None
    pieces = []
    for combo in itertools.product(*per_dim):
        guards = tuple(g for gs, _ in combo for g in gs)
        kept = _feasible(space, guards)
        if kept is not None:
            pieces.append(Piece(kept, tuple(v for _, v in combo)))
    if not pieces or len(pieces) > MAX_PIECES:
        return None
    return pieces


def _cases(space: AxisSpace, e: PrimExpr) -> list[_Case]:
    """``e`` as (guards, affine value) cases whose guards partition the domain."""
    try:
        space.affine(e)
        return [((), e)]
    except UnsupportedOperatorError:
        pass
    if isinstance(e, tirx.IntImm):
        return [((), e)]
    if isinstance(e, (tirx.Add, tirx.Sub)):
        join = (lambda a, b: a + b) if isinstance(e, tirx.Add) else (lambda a, b: a - b)
        return _combine(space, _cases(space, e.a), _cases(space, e.b), join)
    if isinstance(e, tirx.Mul) and isinstance(e.b, tirx.IntImm):
        return [(g, v * e.b) for g, v in _cases(space, e.a)]
    if isinstance(e, tirx.Mul) and isinstance(e.a, tirx.IntImm):
        return [(g, e.a * v) for g, v in _cases(space, e.b)]
    if isinstance(e, (tirx.Min, tirx.Max)):
        # min(a, b) is a where b - a >= 0; max(a, b) is a where a - b >= 0
        first = isinstance(e, tirx.Min)
        return _branch(space, e.b - e.a if first else e.a - e.b, e.a, e.b)
    if isinstance(e, tirx.Select):
        return _branch_on(space, e.condition, e.true_value, e.false_value)
    if isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op):
        short = e.op.name.rsplit(".", 1)[-1]
        if short == "if_then_else":
            return _branch_on(space, e.args[0], e.args[1], e.args[2])
        if short == "abs":
            x = e.args[0]
            return _branch(space, x, x, tirx.const(0, x.ty.dtype) - x)
    raise UnsupportedOperatorError(f"index '{e}' is not piecewise affine")


def _branch_on(space: AxisSpace, cond: PrimExpr, then: PrimExpr,
               other: PrimExpr) -> list[_Case]:
    """``cond ? then : other`` for an integer comparison ``cond``."""
    forms = {
        tirx.GE: lambda a, b: a - b, tirx.GT: lambda a, b: a - b - 1,
        tirx.LE: lambda a, b: b - a, tirx.LT: lambda a, b: b - a - 1,
    }
    build = forms.get(type(cond))
    if build is None:
        raise UnsupportedOperatorError(f"index condition '{cond}' is not a comparison")
    return _branch(space, build(cond.a, cond.b), then, other)


def _branch(space: AxisSpace, nonneg: PrimExpr, then: PrimExpr,
            other: PrimExpr) -> list[_Case]:
    """``then`` where ``nonneg >= 0``, ``other`` where ``nonneg < 0`` (i.e. ``-nonneg - 1 >= 0``)."""
    out: list[_Case] = []
    one = tirx.const(1, nonneg.ty.dtype)
    for g, v in _cases(space, nonneg):
        out += [(g + (v,) + tg, tv) for tg, tv in _cases(space, then)]
        out += [(g + (tirx.const(0, v.ty.dtype) - v - one,) + og, ov) for og, ov in _cases(space, other)]
    return out


def _combine(space: AxisSpace, left: list[_Case], right: list[_Case], join) -> list[_Case]:
    return [(lg + rg, join(lv, rv)) for lg, lv in left for rg, rv in right]


def _feasible(space: AxisSpace, guards: Sequence[PrimExpr]) -> tuple[PrimExpr, ...] | None:
    """``guards`` without those that always hold where the others do; ``None`` if they cannot
    all hold (the analyzer proves one false under the others)."""
    kept = [space.analyzer.simplify(g) for g in guards]  # the analyzer's scopes need it
    i = 0
    while i < len(kept):
        others = kept[:i] + kept[i + 1:]
        with contextlib.ExitStack() as stack:
            for g in others:
                stack.enter_context(space.analyzer.constraint_scope(g >= 0))
            if space.analyzer.can_prove(kept[i] < 0):
                return None
            holds = space.analyzer.can_prove(kept[i] >= 0)
        if holds:
            kept.pop(i)
        else:
            i += 1
    return tuple(kept)

