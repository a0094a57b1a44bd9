"""ONNX ``Pad`` back to ``relax.nn.pad``, before partitioning.

TVM 0.27's ONNX importer lowers ``Pad`` straight to TE (``bb.emit_te`` of ``topi.nn.pad``,
``topi.nn.mirror_pad(..., "REFLECT")`` or ``topi.nn.replicate_pad`` for the modes constant,
reflect and edge), so the graph holds an opaque ``call_tir`` that no ICCA pattern can match.
:class:`RecognizePad` turns each such call back into ``relax.nn.pad`` with the same widths,
mode and value, which :mod:`tvm_icca.ops.padding` offloads; a reflect or edge Pad of several
axes becomes one pad per axis (:func:`per_axis_pads`).

A ``call_tir`` is rewritten only when its PrimFunc *is* the importer's: the widths are read
off the PrimFunc's input index (candidates), and the PrimFunc that ``emit_te`` builds from
those widths must be structurally equal to the one in the module -- the same TIR, the same
pad value to the last bit. Reflect padding is rewritten only when every width is smaller
than its dimension, where ``mirror_pad``'s REFLECT and ``relax.nn.pad``'s ``reflect``
(``topi.nn.reflect_pad``) read the same elements (``numpy.pad``'s ``reflect``); wider
reflections stay as they were.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator, Sequence

import tvm
import tvm_ffi
from tvm import relax, tirx, topi
from tvm.ir import IRModule
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from tvm_icca.frontend.rewrites import drop_unused_primfuncs

__all__ = ["RecognizePad", "per_axis_pads", "recognize_pad"]

#: Width combinations tried per call: one per axis is the rule (the widths are read off the
#: index); only a padded axis of extent 1, whose index is a constant, leaves its width open.
_MAX_CANDIDATES = 64


def _importer_primfunc(te_func: Callable, data_ty: relax.TensorType, *args: Any) -> tirx.PrimFunc:
    """The PrimFunc ``bb.emit_te(te_func, data, *args)`` makes, as the importer calls it."""
    data = relax.Var("data", data_ty)
    bb = relax.BlockBuilder()
    with bb.function("f", [data]):
        out = bb.emit_te(te_func, data, *args)
        bb.emit_func_output(out)
    return next(f for _, f in bb.get().functions_items() if isinstance(f, tirx.PrimFunc))


def _modes(before: list[int], after: list[int], value: float) -> Iterator[tuple[str, Callable, tuple]]:
    """(relax pad mode, topi function, its arguments) of each mode the importer emits."""
    yield "constant", topi.nn.pad, (before, after, value)
    yield "reflect", topi.nn.mirror_pad, (before, after, "REFLECT")
    yield "replicate", topi.nn.replicate_pad, (before, after)


def _subexprs(e: Any) -> Iterator[Any]:
    yield e
    for name in ("a", "b", "value", "condition", "true_value", "false_value"):
        child = getattr(e, name, None)
        if child is not None and not isinstance(child, (int, float, str)) and hasattr(child, "ty"):
            yield from _subexprs(child)
    if isinstance(e, tvm.ir.Call):
        for arg in e.args:
            yield from _subexprs(arg)


def _vars(e: Any) -> set:
    return {s for s in _subexprs(e) if isinstance(s, tvm.ir.Var)}


def _input_loads(prim: tirx.PrimFunc) -> tuple[list, list]:
    """The reads of the PrimFunc's first buffer, and the float constants it stores."""
    data = prim.params[0]
    loads, floats = [], []

    def visit_store(store: tirx.BufferStore) -> None:
        for s in _subexprs(store.value):
            if isinstance(s, tvm.ir.TensorLoad) and s.source.same_as(data):
                loads.append(s)
            elif isinstance(s, tirx.FloatImm):
                floats.append(float(s.value))

    tvm_ffi.structural_walk(prim.body, [(tirx.BufferStore, visit_store)])
    return loads, floats


def _width_candidates(load: Any, totals: Sequence[int]) -> list[list[int]] | None:
    """Per axis, the ``before`` widths the read ``load`` may have been made with: the offset
    ``c`` of a subexpression ``v - c`` of the axis's index (``v`` its one iteration variable),
    or every width up to the axis's total when the index is a constant."""
    analyzer = tvm.sym.Analyzer()
    out = []
    for index, total in zip(load.indices, totals):
        found = _vars(index)
        if not found:
            out.append(list(range(total + 1)))
            continue
        if len(found) != 1:
            return None
        (var,) = found
        widths = set()
        for s in _subexprs(index):
            if not hasattr(s, "ty") or not str(s.ty.dtype).startswith("int"):
                continue
            shift = analyzer.simplify(s - var)
            if isinstance(shift, tirx.IntImm) and 0 <= -int(shift.value) <= total:
                widths.add(-int(shift.value))
        out.append(sorted(widths) or ([0] if total == 0 else []))
        if not out[-1]:
            return None
    return out


def recognize_pad(prim: tirx.PrimFunc, data_ty: relax.TensorType) -> tuple[list[int], str, float] | None:
    """``(pad_width, mode, value)`` of ``relax.nn.pad`` equal to the importer's PrimFunc
    ``prim`` applied to a tensor of type ``data_ty``, or ``None`` if it is no Pad of the
    importer (see the module)."""
    if len(prim.params) != 2 or any(not hasattr(b, "shape") for b in prim.params):
        return None
    src, dst = prim.params
    if len(src.shape) != len(dst.shape) or not all(
            isinstance(d, tirx.IntImm) for d in (*src.shape, *dst.shape)):
        return None
    shape = [int(d) for d in src.shape]
    totals = [int(d) - s for d, s in zip(dst.shape, shape)]
    if any(t < 0 for t in totals):
        return None
    loads, floats = _input_loads(prim)
    if not loads:
        return None
    candidates = _width_candidates(loads[0], totals)
    if candidates is None:
        return None
    combos = list(itertools.islice(itertools.product(*candidates), _MAX_CANDIDATES + 1))
    if len(combos) > _MAX_CANDIDATES:
        return None
    value = floats[0] if floats else 0.0
    for before in combos:
        after = [t - b for t, b in zip(totals, before)]
        for mode, te_func, args in _modes(list(before), after, value):
            if mode == "reflect" and any(max(b, a) >= n for b, a, n in zip(before, after, shape)):
                continue
            try:
                made = _importer_primfunc(te_func, data_ty, *args)
            except (ValueError, AssertionError, RuntimeError):
                continue  # topi refuses these widths for this mode: not the importer's call
            if tvm_ffi.structural_equal(made, prim, map_free_vars=True):
                widths = [w for pair in zip(before, after) for w in pair]
                return widths, mode, value if mode == "constant" else 0.0
    return None


def _pad_rewriter(mod: IRModule) -> tuple[Any, Callable]:
    pattern = is_op("relax.call_tir")(wildcard(), wildcard())

    def rewrite(orig: relax.Expr, _: dict) -> relax.Expr:
        if not isinstance(orig, relax.Call):
            return orig  # a variable bound to the call (``gv = lv``): the call is rewritten
        gvar, args = orig.args[0], orig.args[1]
        if not isinstance(gvar, tvm.ir.GlobalVar) or not isinstance(args, relax.Tuple) \
                or len(args.fields) != 1:
            return orig
        prim = mod[gvar] if gvar in mod.get_global_vars() else None
        data = args.fields[0]
        if not isinstance(prim, tirx.PrimFunc) or not isinstance(data.ty, relax.TensorType) \
                or not isinstance(orig.ty, relax.TensorType):
            return orig
        found = recognize_pad(prim, data.ty)
        if found is None:
            return orig
        widths, mode, value = found
        return per_axis_pads(data, widths, mode, value)

    return pattern, rewrite


def per_axis_pads(data: relax.Expr, widths: Sequence[int], mode: str, value: float) -> relax.Expr:
    """``relax.nn.pad(data, widths, mode, value)``; reflect and replicate as one pad per
    padded axis, outermost first (both are separable: padding axis after axis reads the same
    elements, the corners included). Each padded axis makes a read of three affine pieces
    (:mod:`tvm_icca.lower.te_pieces`) and each piece is a tensor of the plan search, which
    joins its tensors' options (:mod:`tvm_icca.plan_search.plan_space`): two axes at once would be
    nine."""
    padded = [d for d in range(len(widths) // 2) if widths[2 * d] or widths[2 * d + 1]]
    if mode == "constant" or len(padded) <= 1:
        return relax.op.nn.pad(data, list(widths), mode, value)
    out = data
    for d in padded:
        one = [0] * len(widths)
        one[2 * d], one[2 * d + 1] = widths[2 * d], widths[2 * d + 1]
        out = relax.op.nn.pad(out, one, mode, value)
    return out


@tvm.transform.module_pass(opt_level=0, name="icca.RecognizePad")
class RecognizePad:
    """Rewrite the ``call_tir`` of TVM's ONNX ``Pad`` (constant, reflect, edge) into
    ``relax.nn.pad``; PrimFuncs no longer called are removed. Run it before
    ``FuseOpsByPattern``."""

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        pattern, rewrite = _pad_rewriter(mod)
        changed = False
        for gvar, func in list(mod.functions_items()):
            if not isinstance(func, relax.Function):
                continue
            new = rewrite_call(pattern, rewrite, func)
            if not new.same_as(func):
                mod[gvar] = new
                changed = True
        return drop_unused_primfuncs(mod) if changed else mod
