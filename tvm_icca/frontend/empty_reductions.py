"""Reductions over an axis of length zero, replaced by their identity before partitioning.

A matmul whose reduction axis has length 0 (``[M, 0] @ [0, N]``) or a ``sum`` over an empty
axis has a well-defined answer: the identity of the reduction, here 0, broadcast to the
output shape (the empty sum; numpy and ``onnx.reference`` agree, and the ONNX operator
specifications name these values: ``ReduceSum`` 0, ``ReduceProd`` 1, ``ReduceMax`` minus
infinity or the lowest value of the dtype, ``ReduceMin`` plus infinity or the highest;
``ReduceMean`` of nothing is "undefined" there, numpy's nan here). TVM 0.27's llvm build of such a call reads an accumulator it never initialized and
returns garbage (5e36 seen), and no plan of the chip has a core for a zero-length axis, so the
call would leave the chip and give that garbage. :class:`FoldEmptyReductions` writes the
answer as a constant-filled tensor instead:

========================  ==============
reduction over nothing    value
========================  ==============
``matmul``, ``sum``       ``0``
``prod``                  ``1``
``max``                   ``-inf`` (lowest value of an integer dtype)
``min``                   ``+inf`` (highest value of an integer dtype)
``mean``                  ``nan`` (0 / 0)
========================  ==============

Any other call that reads a tensor with an empty axis and writes a non-empty one (an
``argmax``, a ``variance``, a convolution over zero channels, an ONNX ``Einsum`` that TVM's
importer lowered to a TIR function) would compute a reduction over nothing the same way, so
:func:`refuse_empty_reductions` refuses it with one clear error before anything is built:
never a wrong answer. Ops that write every output element without reducing over the empty
axis (:data:`EMPTY_INPUT_SAFE`: a concatenation with an empty piece, a pad, a scatter) pass.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.dpl import is_op, wildcard

from runtime_sim.contract.errors import UnsupportedOperatorError
from tvm_icca.frontend.rewrites import rewrite_functions

__all__ = ["EMPTY_INPUT_SAFE", "FoldEmptyReductions", "refuse_empty_reductions"]

#: Relax reduction op -> the value of that reduction over the empty set (float dtypes).
_IDENTITY = {
    "relax.sum": 0.0,
    "relax.prod": 1.0,
    "relax.max": -math.inf,
    "relax.min": math.inf,
    "relax.mean": math.nan,
}


def _static_shape(expr: relax.Expr) -> tuple[int, ...] | None:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    if not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
        return None
    return tuple(int(d) for d in ty.shape.values)


def _value_for(dtype: str, value: float) -> float | int:
    """``value`` in ``dtype``: integers have no inf or nan (their extremes stand in)."""
    if np.dtype(dtype).kind in "iub":
        info = np.iinfo(np.dtype(dtype)) if np.dtype(dtype).kind != "b" else None
        if math.isnan(value):
            return 0
        if math.isinf(value):
            return (info.min if value < 0 else info.max) if info is not None else value > 0
        return int(value)
    return value


def _filled(like: relax.Expr, value: float) -> relax.Expr | None:
    shape = _static_shape(like)
    if shape is None:
        return None
    dtype = str(like.ty.dtype)
    # (relax.op.full does not legalize in TVM 0.27: its legalizer hands topi a PrimType)
    return relax.op.broadcast_to(relax.const(_value_for(dtype, value), dtype), shape)


def _empty_matmul(call: relax.Call, _: dict) -> relax.Expr:
    a = _static_shape(call.args[0])
    if a is None or not a or a[-1] != 0:
        return call
    filled = _filled(call, 0.0)
    return call if filled is None else filled


def _empty_reduction(call: relax.Call, _: dict) -> relax.Expr:
    shape = _static_shape(call.args[0])
    if shape is None:
        return call
    axes = call.attrs.axis
    reduced = range(len(shape)) if axes is None else [int(a) % len(shape) for a in axes]
    if not any(shape[a] == 0 for a in reduced):
        return call
    filled = _filled(call, _IDENTITY[call.op.name])
    return call if filled is None else filled


@tvm.transform.module_pass(opt_level=0, name="icca.FoldEmptyReductions")
class FoldEmptyReductions:
    """Replace each reduction over a zero-length axis by its identity (module docstring)."""

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        rewriters = [(is_op("relax.matmul")(wildcard(), wildcard()), _empty_matmul)]
        rewriters += [(is_op(name)(wildcard()), _empty_reduction) for name in _IDENTITY]
        for gvar, func in rewrite_functions(mod, rewriters).items():
            mod[gvar] = func
        return mod


#: Relax ops that may read an empty tensor and write a non-empty one correctly: each output
#: element is copied or set, none reduced over the empty axis.
EMPTY_INPUT_SAFE = frozenset({"relax.concat", "relax.nn.pad", "relax.scatter_elements",
                              "relax.scatter_nd"})

#: Relax ops that call a lowered function: their tensors are the fields of argument 1.
_CALL_OPS = frozenset({"relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed"})


def _call_inputs(call: relax.Call) -> list[relax.Expr]:
    if call.op.name in _CALL_OPS and len(call.args) > 1:
        args = call.args[1]
        return list(args.fields) if isinstance(args, relax.Tuple) else [args]
    return list(call.args)


def _call_name(call: relax.Call) -> str:
    if call.op.name in _CALL_OPS and call.args and isinstance(call.args[0], tvm.ir.GlobalVar):
        return f"the TIR function '{call.args[0].name_hint}' ({call.op.name})"
    return call.op.name


def refuse_empty_reductions(mod: IRModule) -> None:
    """Raise :class:`UnsupportedOperatorError` for the first call of ``mod`` that reads a
    tensor with a zero-length axis and writes a non-empty tensor, unless
    :class:`FoldEmptyReductions` folded it or its op is in :data:`EMPTY_INPUT_SAFE` (module
    docstring). Run after :class:`FoldEmptyReductions`, before anything folds constants."""
    found: list[str] = []

    def visit(node: relax.Expr) -> None:
        if found or not isinstance(node, relax.Call) or not isinstance(node.op, tvm.ir.Op):
            return
        if node.op.name in EMPTY_INPUT_SAFE:
            return
        out = _static_shape(node)
        if out is None or 0 in out:
            return
        for arg in _call_inputs(node):
            shape = _static_shape(arg)
            if shape is not None and 0 in shape:
                found.append(
                    f"{_call_name(node)} reads a tensor of shape {list(shape)} (an axis of length "
                    f"0) and writes one of shape {list(out)}: a reduction over nothing, which "
                    "TVM builds to return uninitialized memory. tvm_icca gives the empty "
                    "matmul, sum, prod, max, min and mean their identity; remove the empty "
                    "axis from the model for this op")
                return

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
            if found:
                raise UnsupportedOperatorError(found[0])
