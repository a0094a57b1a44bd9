"""Which template computes an operator: its template kind (a :mod:`schedules` name).

The kind of a converted operator (:mod:`tvm_icca.lower.te_to_expr`) is chosen from the Relax ops
it was made of, checked against the structure of its tensor expression: a composite
"conv2d + bias + relu" is a conv2d, but a matmul whose sum ended up core-local inside a
softmax is not run as a GEMM. When no listed op fits, the structure alone decides.
"""

from __future__ import annotations

from typing import Sequence

from runtime_sim.contract.expr import Expr, TensorExpr
from schedules.base import contraction_roles

__all__ = ["kind_of"]

# Template kind per Relax op, most specific first: the kind of a function is the one of its
# highest-ranked op whose template fits the extracted structure (a composite "conv2d + bias +
# relu" is a conv2d). Ops not listed here (permute_dims, add, relu, ...) do not decide the
# template; when no listed op fits, the structure decides (see _structural_kind).
_KIND_RANK: tuple[tuple[str, tuple[str, ...]], ...] = (
    # a 1-D convolution is the same implicit GEMM (or per-channel window sum) with one
    # spatial axis: the templates read the roles off the tensor expression, not the rank
    ("conv2d", ("relax.nn.conv2d", "relax.nn.conv1d")),
    ("depthwise_conv2d", ("relax.nn.conv2d", "relax.nn.conv1d")),
    ("matmul", ("relax.matmul",)),
    ("softmax", ("relax.nn.softmax", "relax.nn.log_softmax")),
    # a variance reads its mean inside its sum: nested core-local statistics over whole
    # rows, costed with hoisting like a layer norm's (instance and group norm)
    ("layer_norm", ("relax.nn.layer_norm", "relax.nn.rms_norm", "relax.variance")),
    ("reduce", ("relax.sum", "relax.mean", "relax.max", "relax.min",
                "relax.std", "relax.nn.max_pool2d", "relax.nn.avg_pool2d",
                "relax.nn.adaptive_avg_pool2d")),
)


def kind_of(op_names: Sequence[str], expr: TensorExpr | None = None) -> str:
    """The template kind (a :mod:`schedules` name) of a function with these Relax ops.

    The highest-ranked op decides, provided its template fits ``expr`` (a matmul whose sum
    ended up core-local inside a softmax is not run as a GEMM); otherwise the structure of
    ``expr`` decides: a sum of products of two tensors is 'matmul' ('conv2d' when read
    through compound indices), any other reduction is 'reduce', the rest 'elementwise'.
    """
    if expr is not None and expr.kind == "attention":  # the fused operator names itself
        return "attention"
    names = set(op_names)
    for kind, ops in _KIND_RANK:
        if names.intersection(ops) and (expr is None or _kind_fits(kind, expr)):
            return kind
    return "elementwise" if expr is None else _structural_kind(expr)


def _is_product_of_loads(expr: TensorExpr) -> bool:
    def factors(node: Expr) -> list[Expr] | None:
        if node["op"] == "mul":
            parts = [factors(a) for a in node["args"]]
            return None if any(p is None for p in parts) else [f for p in parts for f in p]
        if node["op"] == "cast":
            return factors(node["args"][0])
        return [node] if node["op"] == "load" else None

    loads = factors(expr.body)
    return loads is not None and len(loads) == 2


def _kind_fits(kind: str, expr: TensorExpr) -> bool:
    reduces = bool(expr.reduce_axes) or bool(expr.local_axes)
    if kind in ("matmul", "conv2d", "depthwise_conv2d"):
        if not (expr.reduce_axes and _is_product_of_loads(expr)):
            return False
        if kind == "matmul":
            return True
        # no output axis read by the weight alone: every output channel has its own filter
        # over its own input channels (depthwise), nothing for a matrix unit to contract
        return (kind == "depthwise_conv2d") == (not contraction_roles(expr).n)
    if kind == "reduce":
        return reduces
    if kind == "elementwise":
        return not reduces
    return True


def _structural_kind(expr: TensorExpr) -> str:
    if expr.reduce_axes and _is_product_of_loads(expr):
        compound = any(len(i.terms) > 1 for t in expr.inputs for i in t.indices)
        return "conv2d" if compound else "matmul"
    if expr.reduce_axes or expr.local_axes:
        return "reduce"
    return "elementwise"
