"""The Relax side of :mod:`tvm_icca.ops.masks`: an attention's band mask rewritten as a
predicate on the axis values before partitioning, and the pattern that takes it into the
fused attention.

:func:`MasksAsPredicates` rewrites ``softmax(S + M)`` (float casts allowed between the add
and the softmax), ``M`` a band mask (:func:`tvm_icca.ops.masks.band_of_relax`), into
``softmax(where(cond, fill, S))``; ``cond`` is a fresh chain of ``arange``, ``expand_dims``,
``greater`` / ``less`` and ``logical_or`` per attention (:func:`predicate_pattern`), which the
attention pattern absorbs into its composite and the lowering turns into
``select(gt(j, i + c) [or lt(j, i + c')], fill, score)``
(:func:`tvm_icca.ops.masks.canonical_mask`).
"""

from __future__ import annotations

from typing import Mapping

import tvm
from tvm import relax
from tvm.relax.dpl.pattern import DFPattern, is_op, wildcard

from tvm_icca.ops.masks import BandMask, band_of_relax, large_negative
from tvm_icca.ops.relax_types import static_shape

__all__ = ["MasksAsPredicates", "PREDICATE_OPS", "predicate_pattern"]

#: The Relax ops of the predicate chain :func:`MasksAsPredicates` writes (integer and bool
#: values the cores never hold as tensors: the lowering turns them into axis predicates).
PREDICATE_OPS = ("relax.arange", "relax.expand_dims", "relax.greater", "relax.less",
                 "relax.logical_or")


# -- the predicate in Relax ---------------------------------------------------------------------
def _relax_predicate(bb: relax.BlockBuilder, band: BandMask) -> relax.Var:
    """``cond`` as the Relax chain :func:`predicate_pattern` matches: int32 axis values from
    ``arange`` alone (a constant operand would become an input of the composite, which the
    lowering could not read as an axis predicate)."""
    parts = []
    for op, offset in (("greater", band.upper), ("less", band.lower)):
        if offset is None:
            continue
        # the row value shifted by the bound: i + offset
        rows = bb.emit(relax.op.expand_dims(
            relax.op.arange(offset, band.rows + offset, 1, "int32"), 1))
        cols = bb.emit(relax.op.arange(0, band.keys, 1, "int32"))
        parts.append(bb.emit(getattr(relax.op, op)(cols, rows)))
    if len(parts) == 1:
        return parts[0]
    return bb.emit(relax.op.logical_or(*parts))


def predicate_pattern() -> DFPattern:
    """The chain :func:`MasksAsPredicates` writes for ``cond``: ``arange(keys) > rows`` and/or
    ``arange(keys) < rows``, with ``rows = expand_dims(arange(c, rows + c), 1)``."""
    def arange() -> DFPattern:
        return is_op("relax.arange")(wildcard(), wildcard(), wildcard())

    def compare() -> DFPattern:
        rows = is_op("relax.expand_dims")(arange())
        return is_op("relax.greater")(arange(), rows) | is_op("relax.less")(arange(), rows)

    return compare() | is_op("relax.logical_or")(compare(), compare())


def _softmax_users(var: relax.Var, users: Mapping[relax.Var, list[relax.VarBinding]]) -> bool:
    """Whether every use of ``var`` is a softmax over the last axis, through float casts."""
    found = users.get(var, [])
    if not found:
        return False
    for binding in found:
        call = binding.value
        name = call.op.name if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) else None
        if name == "relax.astype" and str(call.attrs.dtype).startswith(("float", "bfloat")):
            if not _softmax_users(binding.var, users):
                return False
        elif name == "relax.nn.softmax":
            ndim = len(static_shape(call.ty) or ())
            if int(call.attrs.axis) not in (-1, ndim - 1):
                return False
        else:
            return False
    return True


def _plan_function(func: relax.Function) -> dict[relax.Var, tuple[relax.Expr, BandMask, str]]:
    """The adds of ``func`` to rewrite: var -> (scores, band, dtype)."""
    bound: dict[relax.Var, relax.Expr] = {}
    users: dict[relax.Var, list[relax.VarBinding]] = {}
    bindings: list[relax.VarBinding] = []

    def visit(node: object) -> None:
        if isinstance(node, relax.SeqExpr):
            for block in node.blocks:
                for b in block.bindings:
                    if isinstance(b, relax.VarBinding):
                        bound[b.var] = b.value
                        bindings.append(b)

    relax.analysis.post_order_visit(func, visit)
    for b in bindings:
        seen: list[relax.Var] = []

        def collect(node: object) -> None:
            if isinstance(node, relax.Var) and not any(node.same_as(s) for s in seen):
                seen.append(node)

        relax.analysis.post_order_visit(b.value, collect)
        for v in seen:
            users.setdefault(v, []).append(b)
    plans = {}
    for b in bindings:
        call = b.value
        if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)
                and call.op.name == "relax.add"):
            continue
        out = static_shape(call.ty)
        dtype = str(call.ty.dtype)
        if out is None or len(out) < 2 or not dtype.startswith(("float", "bfloat")):
            continue
        if not _softmax_users(b.var, users):
            continue
        for scores, mask in (call.args, reversed(call.args)):
            if static_shape(scores.ty) != out or static_shape(mask.ty) is None:
                continue
            band = band_of_relax(mask, bound, out[-2], out[-1])
            if band is not None and large_negative(band.fill, dtype):
                plans[b.var] = (scores, band, dtype)
                break
    return plans


def MasksAsPredicates() -> tvm.transform.Pass:  # noqa: N802 (a pass, named like TVM's)
    """Rewrite ``softmax(S + M)`` with ``M`` a band mask (:func:`band_of_relax`) into
    ``softmax(where(cond, fill, S))``, ``cond`` the Relax chain of :func:`predicate_pattern`.

    Exact: where ``M`` is 0 the score is ``S`` either way. Where ``M`` is ``fill``, ``S +
    fill`` is not ``fill``, but both are far below the row's maximum ``m``, which a visible key
    provides (every row of a recognized band sees at least one key; a mask with an empty row
    is refused): ``fill`` is ``-inf`` or at most half the dtype's lowest finite value
    (about ``-1.7e38`` in float32, ``-32752`` in float16), so ``exp(S + fill - m)`` and
    ``exp(fill - m)`` both underflow to exactly 0 in the float32 softmax (``exp(x) = 0`` for
    ``x < -104``) as long as a masked score exceeds the row's maximum by less than
    ``|fill| - 104``, which every finite score of a float32 model does; the row's sum and
    products are then bit-identical. (A masked score that is NaN or infinite poisons the
    unfused row and not this one.) The online softmax of the fused operator keeps the identity: a block of
    keys all masked contributes ``exp(fill - m') = 0`` once a visible key has set ``m'``, and
    if it came first, its terms are scaled by ``exp(fill - m') = 0`` when the visible key
    arrives. Masks computed from a runtime input (padding) are not band masks and stay.
    The chain the mask was computed by is dropped when nothing else reads it.
    """

    @tvm.transform.module_pass(opt_level=0, name="IccaMasksAsPredicates")
    def transform(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        updates = {}
        for gvar, func in mod.functions_items():
            if not isinstance(func, relax.Function) or (func.attrs or {}).get("Composite"):
                continue
            plans = _plan_function(func)
            if plans:
                updates[gvar] = relax.analysis.remove_all_unused(_Rewriter(mod, plans).visit_expr(func))
        for gvar, func in updates.items():
            mod[gvar] = func
        return mod

    return transform


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, plans: Mapping[relax.Var, tuple]) -> None:
        super().__init__(mod)
        self.plans = plans

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        plan = next((p for v, p in self.plans.items() if v.same_as(binding.var)), None)
        if plan is None:
            super().visit_var_binding_(binding)
            return
        scores, band, dtype = plan
        cond = _relax_predicate(self.builder_, band)
        value = self.builder_.normalize(
            relax.op.where(cond, relax.const(band.fill, dtype), self.visit_expr(scores)))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, value))
