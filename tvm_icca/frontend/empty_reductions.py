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
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.dpl import is_op, wildcard

from tvm_icca.frontend.rewrites import rewrite_functions

__all__ = ["FoldEmptyReductions"]

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
