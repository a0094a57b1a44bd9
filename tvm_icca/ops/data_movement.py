"""Data movement on the chip: concat, split and strided slice as exact re-layouts.

These ops compute nothing; each is the identity with a different index map between the
placement of its inputs and the placement of its output (T10 §5: "the program may rearrange
the data on cores"). They need no template of their own: TVM's TE of each op
(:mod:`tvm_icca.ops.te_capture`) already is the map, and :mod:`tvm_icca.lower.te_to_expr` turns it
into a :class:`~runtime_sim.contract.expr.TensorExpr` the planner, the functional device and the
timing simulator read alike:

* ``strided_slice`` is affine: ``out[.., i, ..] = in[.., begin + i*stride, ..]`` (topi's
  ``strided_slice_with_axes``), a compound index like a convolution window's (T10 §5). Each
  core's input box is the range its output block reads, so a re-layout moves only those rows.
* ``concat`` is piecewise: output range ``[off_k, off_k + n_k)`` of the axis reads input ``k``
  at ``ax - off_k`` (topi's ``concatenate``: nested ``if_then_else`` on the axis). Every input
  is placed through its shifted index and clipped to its bounds
  (:func:`runtime_sim.contract.relayout.input_boxes`), so a core owning an output block receives exactly
  the parts of each input that overlap it and nothing of the others; the body's ``select``
  on the axis picks the piece (a *guarded read*, see
  :func:`runtime_sim.contract.expr.guarded_inputs`).
* rotary position embeddings (``x*cos + rotate_half(x)*sin``) are one composite,
  :func:`rotary_embedding_pattern`: one elementwise operator reading ``x`` three ways.
* ``split`` returns a tuple, which one tensor expression cannot; :func:`split_to_slices`
  rewrites each ``TupleGetItem`` of a split into the ``strided_slice`` it is, before
  partitioning, so every output is an ordinary slice (one operator per output, each moving
  only its own range).

Take/gather (embedding lookups) index a tensor with *data*, which no affine index map
expresses: they have their own index kind, see :mod:`tvm_icca.ops.gather`.
"""

from __future__ import annotations

from typing import Callable

import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import Pattern
from tvm.relax.dpl.pattern import is_op, is_tuple, wildcard
from tvm.relax.transform import PatternCheckContext

__all__ = [
    "DATA_MOVEMENT_OPS",
    "data_movement_patterns",
    "data_movement_reason",
    "rotary_embedding_pattern",
    "split_to_slices",
    "tensor_operands",
]

#: Data movement ops that run on the chip: pattern suffix -> Relax op.
DATA_MOVEMENT_OPS: dict[str, str] = {
    "concat": "relax.concat",
    "strided_slice": "relax.strided_slice",
}


def tensor_operands(call: relax.Call) -> list[relax.Expr]:
    """The tensors a data movement call reads: concat's tuple fields, a slice's data.

    Other arguments (a slice's ``axes``/``begin``/``end``/``strides``) are compile-time
    integers, not data.
    """
    name = call.op.name if isinstance(call.op, tvm.ir.Op) else ""
    if name == "relax.concat" and isinstance(call.args[0], relax.Tuple):
        return list(call.args[0].fields)
    if name == "relax.strided_slice":
        return [call.args[0]]
    return list(call.args)


def _static_ints(expr: relax.Expr) -> list[int] | None:
    """A tuple of integer constants (a slice's begin/end/strides), or ``None``."""
    if not isinstance(expr, relax.Tuple):
        return None
    out = []
    for field in expr.fields:
        if not isinstance(field, tvm.tirx.IntImm):
            return None
        out.append(int(field.value))
    return out


def data_movement_reason(call: relax.Call) -> str | None:
    """Why a concat or strided slice cannot run on the chip, or ``None`` if it can."""
    name = call.op.name
    if name == "relax.concat":
        if not isinstance(call.args[0], relax.Tuple):
            return "concat of a tuple variable (not a tuple of tensors) is not offloaded"
        return None
    if name == "relax.strided_slice":
        parts = [_static_ints(a) for a in call.args[1:]]
        if any(p is None for p in parts):
            return "strided_slice with begin/end/strides that are not compile-time integers"
        return None
    return None


def data_movement_patterns(prefix: str, check: Callable[[PatternCheckContext], bool]) -> list[Pattern]:
    """``<prefix>.concat`` and ``<prefix>.strided_slice``, each accepted by ``check`` (the
    pattern table's operand check, :mod:`tvm_icca.partition.patterns`).

    One concat pattern matches every input count: its argument is a wildcard, which matches
    the tuple expression as a whole, and the fused composite takes the tuple's fields as its
    parameters (``FuseOpsByPattern`` makes every field of a matched call's tuple argument a
    parameter). Relax's tuple patterns have a fixed arity, so the alternative is a pattern
    per arity with a limit. A concat of a tuple *variable* also matches the wildcard; the
    check rejects it (:func:`data_movement_reason`)."""
    data = wildcard()
    root = is_op("relax.strided_slice")(data, varg_default_wildcard=True)
    table: list[Pattern] = [(f"{prefix}.strided_slice", root, {"data": data, "root": root}, check)]
    fields = wildcard()
    root = is_op("relax.concat")(fields)
    table.append((f"{prefix}.concat", root, {"inputs": fields, "root": root}, check))
    return table


def rotary_embedding_pattern(prefix: str, check: Callable[[PatternCheckContext], bool]) -> Pattern:
    """Rotary position embedding (RoFormer, Llama): ``x*cos + rotate_half(x)*sin`` with
    ``rotate_half(x) = concat(-x[..., h:], x[..., :h])``, as one composite: its TE reads ``x``
    through three index maps (itself and the two shifted halves) and is one elementwise
    operator, with no intermediate tensor between the slices, the concat and the products.
    It is registered after the single-op patterns it contains, so it is tried before them.
    The slice bounds need no check: the tensor expression comes from the TE of the matched
    ops, whatever they are."""
    x, cos, sin = wildcard(), wildcard(), wildcard()
    lo = is_op("relax.strided_slice")(x, varg_default_wildcard=True)
    hi = is_op("relax.strided_slice")(x, varg_default_wildcard=True)
    rotated = is_op("relax.concat")(is_tuple([is_op("relax.negative")(hi), lo]))

    def times(a, b):
        return is_op("relax.multiply")(a, b) | is_op("relax.multiply")(b, a)

    root = is_op("relax.add")(times(x, cos), times(rotated, sin))
    annotations = {"data": x, "cos": cos, "sin": sin, "root": root}
    return (f"{prefix}.rotary_embedding", root, annotations, check)


# -- split -> strided slices -------------------------------------------------------------------
def _slice_of_split(bb: relax.BlockBuilder, split: relax.Call, index: int) -> relax.Expr | None:
    """Output ``index`` of ``split`` as a ``strided_slice`` of its input, or ``None`` when the
    sizes are not static."""
    data = split.args[0]
    tuple_ty = split.ty
    if not isinstance(tuple_ty, relax.TupleType) or not isinstance(data.ty, relax.TensorType):
        return None
    ndim = data.ty.ndim
    axis = int(split.attrs.axis) % ndim if ndim > 0 else 0
    sizes = []
    for field in tuple_ty.fields:
        shape = getattr(field, "shape", None)
        if not isinstance(shape, relax.ShapeExpr):
            return None
        dim = shape.values[axis]
        if not isinstance(dim, tvm.tirx.IntImm):
            return None
        sizes.append(int(dim.value))
    begin = sum(sizes[:index])
    return relax.op.strided_slice(data, axes=[axis], begin=[begin], end=[begin + sizes[index]],
                                  strides=[1])


@relax.expr_functor.mutator
class _SplitRewriter(relax.PyExprMutator):
    """Replaces ``TupleGetItem(split(x), i)`` with the slice of ``x`` it is."""

    def visit_tuple_getitem_(self, op: relax.TupleGetItem) -> relax.Expr:  # noqa: N802
        value = op.tuple_value
        bound = self.lookup_binding(value) if isinstance(value, relax.Var) else value
        if (isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op)
                and bound.op.name == "relax.split"):
            sliced = _slice_of_split(self.builder_, bound, int(op.index))
            if sliced is not None:
                return self.builder_.normalize(sliced)
        return super().visit_tuple_getitem_(op)


def split_to_slices() -> tvm.transform.Pass:
    """A pass rewriting every ``split`` output read through ``TupleGetItem`` into the
    ``strided_slice`` it is (the split itself is dropped once nothing reads the tuple)."""

    def transform(func: relax.Function, _mod: tvm.IRModule,
                  _ctx: tvm.transform.PassContext) -> relax.Function:
        if not _has_split(func):
            return func
        return relax.analysis.remove_all_unused(_SplitRewriter().visit_expr(func))

    return relax.transform.function_pass(transform, opt_level=0, name="IccaSplitToSlices")


def _has_split(func: relax.Function) -> bool:
    found = []

    def visit(node: relax.Expr) -> None:
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op) \
                and node.op.name == "relax.split":
            found.append(node)

    relax.analysis.post_order_visit(func.body, visit)
    return bool(found)

