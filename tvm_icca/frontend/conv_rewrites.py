"""Relax rewrites for convolutional networks, run before partitioning.

Batch normalization in inference form (ONNX ``BatchNormalization`` imports as
``relax.nn.batch_norm(..., training=False)`` and ``TupleGetItem(0)``) is a per-channel affine
map ``y = x * s + t`` with ``s = gamma / sqrt(var + eps)`` and ``t = beta - mean * s``
(Ioffe & Szegedy 2015, Alg. 2: the inference network). :class:`FoldInferenceBatchNorm`

* folds a batch norm with constant parameters that follows a conv2d with a constant OIHW
  weight, with or without a constant per-channel bias, into that conv: the weight is scaled
  per output channel and ``t`` (plus the scaled bias) becomes a bias add, which the
  ``icca.conv2d_bias*`` patterns fuse as the conv's epilogue;
* writes any other batch norm with constant parameters as ``x * s + t`` (two broadcast
  elementwise ops the chip runs like any other);
* hands batch norms with non-constant parameters to TVM's
  :func:`tvm.relax.transform.DecomposeOpsForInference` (elementwise arithmetic on the
  parameters, also offloadable).

TVM 0.27 has :class:`tvm.relax.transform.FoldBatchnormToConv2D` for the first case, but it
leaves the scaled weight as Relax arithmetic on constants that only ``FoldConstant`` removes,
by building every constant op with LLVM: 25 builds and about 6 s for one MobileNetV2 block,
which would dominate a model's compile time. Here ``s`` and ``t`` are computed once in numpy
from the constants. The moving statistics are what inference means, so a training-mode batch
norm (which normalizes by the batch's own statistics) is left untouched.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, rewrite_call, wildcard
from tvm.relax.transform import DecomposeOpsForInference

__all__ = ["FoldInferenceBatchNorm"]


def _scale_shift(call: relax.Call, params: list[tvm.ir.GenericConst], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """``s`` and ``t`` of ``y = x * s + t`` for one inference batch norm, computed in float64."""
    gamma, beta, mean, var = (p.value.numpy().astype(np.float64) for p in params)
    attrs = call.attrs
    scale = gamma if attrs.scale else np.ones_like(gamma)
    scale = scale / np.sqrt(var + float(attrs.epsilon))
    shift = (beta if attrs.center else np.zeros_like(beta)) - mean * scale
    return scale.astype(dtype), shift.astype(dtype)


def _channel_shape(ndim: int, axis: int, channels: int) -> list[int]:
    shape = [1] * ndim
    shape[axis] = channels
    return shape


def _fold_function(func: relax.Function) -> relax.Function:
    data, weight = wildcard(), is_const()
    params = [is_const() for _ in range(4)]
    conv = is_op("relax.nn.conv2d")(data, weight)
    conv_norm = is_op("relax.nn.batch_norm")(conv, *params)
    bias = is_const()
    biased = is_op("relax.add")(conv, bias)
    biased_norm = is_op("relax.nn.batch_norm")(biased, *params)
    anything = wildcard()
    norm = is_op("relax.nn.batch_norm")(anything, *params)

    def fold_into_conv(expr: relax.Expr, matches: dict, norm_pattern=conv_norm,
                       conv_bias: np.ndarray | None = None) -> relax.Expr:
        call, conv_call = matches[norm_pattern], matches[conv]
        attrs = conv_call.attrs
        out_layout = attrs.out_layout or attrs.data_layout
        ndim = len(conv_call.ty.shape.values)
        if bool(call.attrs.training) or attrs.kernel_layout != "OIHW" or out_layout != "NCHW" \
                or int(call.attrs.axis) % ndim != 1:
            return expr
        dtype = str(conv_call.ty.dtype)
        scale, shift = _scale_shift(call, [matches[p] for p in params], dtype)
        if conv_bias is not None:  # BN(conv + b) = conv * s + (b * s + t)
            shift = (conv_bias.astype(np.float64) * scale + shift).astype(dtype)
        w = matches[weight].value.numpy()
        folded = relax.Call(conv_call.op, [matches[data], relax.const((w * scale.reshape(-1, 1, 1, 1)).astype(w.dtype))],
                            attrs)
        return relax.op.add(folded, relax.const(shift.reshape(_channel_shape(ndim, 1, shift.size))))

    def fold_biased_into_conv(expr: relax.Expr, matches: dict) -> relax.Expr:
        """A conv with its own bias (ONNX ``Conv`` with ``B``) before the batch norm: the
        bias is one per output channel, or it is not a conv bias and nothing is folded."""
        b = matches[bias].value.numpy()
        channels = int(matches[conv].ty.shape.values[1])
        ndim = len(matches[conv].ty.shape.values)
        if b.size != channels or list(b.shape) not in ([channels], _channel_shape(ndim, 1, channels)):
            return expr
        return fold_into_conv(expr, matches, biased_norm, b.reshape(-1))

    def scale_and_shift(expr: relax.Expr, matches: dict) -> relax.Expr:
        call, x = matches[norm], matches[anything]
        if bool(call.attrs.training) or not isinstance(x.ty, relax.TensorType) or x.ty.ndim < 1:
            return expr
        ndim = x.ty.ndim
        axis = int(call.attrs.axis) % ndim
        scale, shift = _scale_shift(call, [matches[p] for p in params], str(x.ty.dtype))
        shape = _channel_shape(ndim, axis, scale.size)
        return relax.op.add(relax.op.multiply(x, relax.const(scale.reshape(shape))),
                            relax.const(shift.reshape(shape)))

    func = rewrite_call(TupleGetItemPattern(biased_norm, 0), fold_biased_into_conv, func)
    func = rewrite_call(TupleGetItemPattern(conv_norm, 0), fold_into_conv, func)
    return rewrite_call(TupleGetItemPattern(norm, 0), scale_and_shift, func)


def _batch_norms(mod: IRModule) -> list[relax.Call]:
    op = tvm.ir.Op.get("relax.nn.batch_norm")
    found: list[relax.Call] = []

    def visit(call: relax.Call) -> None:
        if isinstance(call.op, tvm.ir.Op) and call.op.same_as(op):
            found.append(call)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            tvm_ffi.structural_walk(func, ((relax.Call, visit),))
    return found


@tvm.transform.module_pass(opt_level=0, name="FoldInferenceBatchNorm")
def FoldInferenceBatchNorm(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:  # noqa: N802
    """Rewrite every inference-mode ``relax.nn.batch_norm`` as conv weights + bias, a
    per-channel ``x * s + t``, or (non-constant parameters) TVM's elementwise decomposition."""
    if not any(not bool(c.attrs.training) for c in _batch_norms(mod)):
        return mod
    updates = {gv: _fold_function(func) for gv, func in mod.functions_items()
               if isinstance(func, relax.Function)}
    for gv, func in updates.items():
        mod[gv] = func
    left = _batch_norms(mod)
    # DecomposeOpsForInference rewrites every batch norm with its moving statistics: only
    # when none of them is a training-mode one
    if left and not any(bool(c.attrs.training) for c in left):
        mod = DecomposeOpsForInference()(mod)
    return mod
