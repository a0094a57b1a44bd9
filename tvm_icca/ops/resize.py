"""Resizes on the chip: the weighted tap sum of linear and cubic interpolation.

:mod:`tvm_icca.frontend.resize_rewrites` writes a ``resize2d`` as repeats and slices
(re-layouts, :mod:`tvm_icca.ops.views` and :mod:`tvm_icca.ops.data_movement`), takes by
constant tables (:mod:`tvm_icca.ops.gather`) and, per interpolated axis, the sum of its taps
(two for linear, four for cubic) weighted by constant per-output weights:
``sum(taps * weights, axis)``, with ``taps`` the take ``[.., out, T, ..]`` and ``weights
[out, T, 1, ..]``. That sum is one composite, :func:`tap_sum_pattern`: TVM's TE of
``sum(multiply(...))`` is one reduction whose body reads both operands
(:mod:`tvm_icca.lower.te_to_expr`), so the product is never written out; as two composites
the ``[.., out, T, ..]`` product would be one more operator and one more tensor of ``T``
times the output on the chip.

The pattern accepts any sum over one axis of a product with a constant (the weights are
compile-time data), which is what the rewrite emits; such a sum elsewhere in a model is the
same exact operator.
"""

from __future__ import annotations

from typing import Callable

from tvm import relax
from tvm.relax.backend.pattern_registry import Pattern
from tvm.relax.dpl.pattern import is_const, is_op, wildcard
from tvm.relax.transform import PatternCheckContext

__all__ = ["tap_sum_pattern"]


def _one_axis_sum(context: PatternCheckContext) -> bool:
    root = context.annotated_expr["root"]
    return isinstance(root, relax.Call) and root.attrs.axis is not None and len(root.attrs.axis) == 1


def tap_sum_pattern(prefix: str, check: Callable[[PatternCheckContext], bool]) -> Pattern:
    """``<prefix>.tap_sum``: ``sum(multiply(taps, weights), axis)`` over one axis with
    constant ``weights``, one operator, accepted by ``check`` (the pattern table's operand
    check, :mod:`tvm_icca.partition.patterns`) too."""
    taps, weights = wildcard(), is_const()
    product = is_op("relax.multiply")(taps, weights)
    root = is_op("relax.sum")(product)
    annotations = {"taps": taps, "weights": weights, "product": product, "root": root}
    return (f"{prefix}.tap_sum", root, annotations,
            lambda context: _one_axis_sum(context) and check(context))
