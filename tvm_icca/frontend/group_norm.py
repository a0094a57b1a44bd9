"""Group normalization as a normalization over a view, before partitioning.

ONNX ``GroupNormalization`` (opsets 18 and 21) imports as ``relax.nn.group_norm``, whose TE
(``topi.nn.group_norm``) reads the channels through the div/mod of a reshape and computes
mean and variance in one pass of a two-value reduction (``E[x^2] - E[x]^2``): no affine index
map (T10 §5) and no reduction the chip has. Group normalization (Wu & He 2018, eq. 1-3 with
the group set of §3.1) is an instance normalization of the view that splits the channels
into groups: with ``x5 = reshape(x, [N, G, C/G, *S])``,

``y5 = (x5 - mean(x5)) / sqrt(var(x5) + eps)`` over the axes ``[2, ...]``, then
``y = reshape(y5 * gamma5 + beta5, x.shape)`` with ``gamma5 = reshape(gamma, [G, C/G, 1, ...])``.

:class:`DecomposeGroupNorm` writes it so, in the form TVM's importer gives ONNX
``InstanceNormalization`` (``mean``, two-pass ``variance``, ``sqrt``, ``divide``), which
:func:`tvm_icca.ops.normalization.instance_norm_patterns` runs as one operator; the two
reshapes only split and merge the channel dimension, re-layouts on the chip
(:mod:`tvm_icca.ops.views`). The variance is two-pass, as ONNX's reference computes it.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.dpl import is_op, wildcard

from tvm_icca.frontend.rewrites import replacing_calls, rewrite_functions

__all__ = ["DecomposeGroupNorm", "group_norm_as_instance_norm"]


def _per_group(param: relax.Expr, shape: list[int]) -> relax.Expr:
    """A per-channel parameter ``[C]`` as ``shape`` ``[G, C/G, 1, ...]``: a constant is
    reshaped here, anything else by a reshape op (a view on the chip)."""
    if isinstance(param, tvm.ir.GenericConst):
        return relax.const(param.value.numpy().reshape(shape))
    return relax.op.reshape(param, shape)


def group_norm_as_instance_norm(call: relax.Call) -> relax.Expr | None:
    """The instance-norm form of the ``relax.nn.group_norm`` ``call`` (see the module), or
    ``None`` when its input has no static shape or its channel axis is not axis 1 with the
    normalized axes all the others after it."""
    data, gamma, beta = call.args
    ty = data.ty
    attrs = call.attrs
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr) \
            or not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values) or ty.ndim < 2:
        return None
    shape = [int(d) for d in ty.shape.values]
    ndim = len(shape)
    axes = sorted(int(a) % ndim for a in attrs.axes)
    if int(attrs.channel_axis) % ndim != 1 or axes != list(range(2, ndim)):
        return None
    groups = int(attrs.num_groups)
    channels = shape[1]
    if groups <= 0 or channels % groups:
        return None
    grouped = [shape[0], groups, channels // groups, *shape[2:]]
    norm_axes = list(range(2, ndim + 1))
    x5 = relax.op.reshape(data, grouped)
    mean = relax.op.mean(x5, norm_axes, keepdims=True)
    var = relax.op.variance(x5, norm_axes, keepdims=True)
    eps = relax.const(np.array(float(attrs.epsilon), dtype=str(data.ty.dtype)))
    y = relax.op.divide(relax.op.subtract(x5, mean), relax.op.sqrt(relax.op.add(var, eps)))
    param_shape = [groups, channels // groups] + [1] * (ndim - 2)
    if bool(attrs.scale):
        y = relax.op.multiply(y, _per_group(gamma, param_shape))
    if bool(attrs.center):
        y = relax.op.add(y, _per_group(beta, param_shape))
    return relax.op.reshape(y, list(shape))


@tvm.transform.module_pass(opt_level=0, name="icca.DecomposeGroupNorm")
class DecomposeGroupNorm:
    """Rewrite every ``relax.nn.group_norm`` of static shape over the axes after its channel
    axis 1 into its instance-norm form (see the module). Run it before ``FuseOpsByPattern``."""

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        pattern = is_op("relax.nn.group_norm")(wildcard(), wildcard(), wildcard())

        for gvar, func in rewrite_functions(mod, [(pattern, replacing_calls(group_norm_as_instance_norm))]).items():
            mod[gvar] = func
        return mod
