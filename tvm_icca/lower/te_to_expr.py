"""From an offloaded Relax operator to a :class:`~runtime_sim.contract.expr.TensorExpr`.

T10 plans every operator from its tensor expression (T10 §4.2, "Operator representation"):
the iteration axes, which of them are summed, and how each tensor dimension is indexed by
the axes -- possibly by a *compound axis* such as ``h*stride + kh*dilation - pad`` (T10 §5).
The TE of a function comes from TVM's own legalization (:func:`tvm_icca.ops.te_capture.compose_te`).
This module converts that TE DAG to a :class:`TensorExpr`: injective producers (transpose,
broadcast, expand_dims, padding) are inlined into affine index maps, elementwise producers
into the body, inner reductions into core-local ``reduce`` nodes, and a sum reduction read
at the identity index by an elementwise result becomes the top-level (splittable) reduction
with the rest as its ``epilogue``. The template kind of the result is chosen by
:func:`schedules.kind_of`.

Refused with :class:`~runtime_sim.contract.errors.UnsupportedOperatorError`: non-affine indices
(a reshape that merges or splits non-unit dims, grouped convolution's ``ff // (F/groups)``),
data-dependent indices other than one take of a function's input by its ids (which
:mod:`tvm_icca.ops.gather` converts to a gathered access), reductions other than sum/max/min (prod, argmax's
tuple reducer), conditional max/min reductions, tuple results (split), dynamic shapes, and
ops without a TVM legalization. Tensors of a dtype no ICCA chip computes
(:data:`runtime_sim.contract.hardware.SUPPORTED_DTYPES`) raise
:class:`~runtime_sim.contract.errors.UnsupportedDtypeError`.

This module chooses the form of the conversion -- which reduction, if any, is the top level and
what its epilogue is -- and returns the :class:`ExtractedOp`. The walk itself is
:class:`tvm_icca.lower.te_converter.TEConverter`, the axes and affine index maps it builds over
:class:`tvm_icca.lower.te_axes.AxisSpace` (where the axis names are described), and the TIR
predicates it reads with :mod:`tvm_icca.lower.te_nodes`.
"""

from __future__ import annotations

from tvm import relax, te, tirx

from runtime_sim.contract.errors import UnsupportedOperatorError
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import check_dtype
from runtime_sim.contract.plan_rules import pinned_axes
from tvm_icca.lower.te_attention import attention_op, is_attention
from tvm_icca.lower.te_converter import InputSource, TEConverter
from tvm_icca.lower.te_nodes import body_of, reduction_combiner, same_tensor, tensor_shape
from tvm_icca.ops.extracted_op import ExtractedOp
from tvm_icca.ops.gather import gather_op
from tvm_icca.ops.te_capture import ComposedTE, compose_te
from tvm_icca.ops.te_capture import ffi_key as _key
from tvm_icca.ops.te_capture import function_label as _func_label
from tvm_icca.ops.views import output_atoms

__all__ = ["ExtractedOp", "extract_op", "tensor_expr_of"]


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def tensor_expr_of(func: relax.Function, name: str = "out") -> TensorExpr:
    """The tensor expression (T10 §4.2, §5) of a small Relax function.

    ``name`` names the output tensor. See :func:`extract_op` for the mapping of the
    expression's inputs back to ``func.params``.
    """
    return extract_op(func, name).expr


def extract_op(func: relax.Function, name: str = "out") -> ExtractedOp:
    """Convert the TE of a BYOC composite function into a :class:`TensorExpr`.

    The TE comes from TVM's own legalization of each op (see :func:`compose_te`). The
    anchor is chosen as T10 §4.2 needs it: a sum reduction is the only reduction that can be
    split across cores, so when the result is elementwise over exactly one sum reduction
    read at the identity index (``mean = sum / N``, ``relu(matmul + bias)``), that reduction
    becomes the top level and the rest its epilogue; otherwise the result expression is the
    body and inner reductions become core-local ``reduce`` nodes.
    """
    composed = compose_te(func)

    gathered = gather_op(func, composed, name)  # an embedding lookup: a data-dependent index
    if gathered is not None:
        return gathered
    sources = _sources(func, composed)
    if is_attention(func):  # softmax(score) @ value, with the online softmax on the cores
        return attention_op(func, composed, sources, name)
    out = composed.output
    check_dtype(str(out.dtype), f"output of {_func_label(func)}")
    if len(out.shape) and any(not isinstance(s, tirx.IntImm) for s in out.shape):
        raise UnsupportedOperatorError(f"{_func_label(func)} has a dynamic output shape")

    # a reshape iterates over its atoms (tvm_icca.ops.views): its div/mod indices become affine
    probe = TEConverter(sources, out_atoms=output_atoms(func))
    try:
        probe.build(out, name)
    except UnsupportedOperatorError as err:
        # The core-local form can fail where the promoted one works (a grouped convolution's
        # ``ff // (F/G)`` is affine only once its output axis is split into groups, which
        # only the top level does): try the one sum reduction the elementwise result reads.
        anchor = _only_sum_reduction(out)
        if anchor is None:
            raise
        conv = TEConverter(sources, epilogue_of=anchor)
        try:
            conv.build(out, name)
        except UnsupportedOperatorError:
            raise err from None
    else:
        conv = probe
        anchor = probe.epilogue_anchor(out)
        if anchor is not None:
            promoted = TEConverter(sources, epilogue_of=anchor)
            try:
                promoted.build(out, name)
                conv = promoted
            except UnsupportedOperatorError:
                pass  # the core-local form of the probe is still exact
    expr = conv.finish(composed.op_names, out, name)
    if conv is probe and _is_minmax_reduction(out):
        # A max/min result (max pooling) is converted with core-local window axes first, which
        # keeps a row reduction splittable (local_splits); but a window read through
        # ``h*stride + kh`` pins ``h`` to whole rows on every core. The top-level form
        # reduces whole windows per core and splits ``h`` like a convolution: take it when
        # it leaves more output axes free.
        windowed = TEConverter(sources, top_level_minmax=True)
        try:
            windowed.build(out, name)
            other = windowed.finish(composed.op_names, out, name)
        except UnsupportedOperatorError:
            other = None
        if other is not None and _free_output_axes(other) > _free_output_axes(expr):
            conv, expr = windowed, other
    return ExtractedOp(
        expr=expr,
        param_of_input=tuple(e.source.param for e in conv.inputs),
        constants={
            i: e.source.constant for i, e in enumerate(conv.inputs) if e.source.constant is not None
        },
    )


# ---------------------------------------------------------------------------------------------
# The function's inputs and the choice of the anchor
# ---------------------------------------------------------------------------------------------


def _sources(func: relax.Function, composed: ComposedTE) -> dict[int, InputSource]:
    """Where each TE placeholder's data comes from, by placeholder op: a param or a constant."""
    out = {}
    for i, (param, ph) in enumerate(zip(func.params, composed.placeholders)):
        out[_key(ph.op)] = InputSource(param.name, tensor_shape(ph), str(ph.dtype), i)
    for ph, value in composed.constants:
        out[_key(ph.op)] = InputSource("const", tensor_shape(ph), str(ph.dtype), None, value)
    return out


def _is_minmax_reduction(out: te.Tensor) -> bool:
    body = body_of(out)
    return isinstance(body, tirx.Reduce) and reduction_combiner(body, out) in ("max", "min")


def _free_output_axes(expr: TensorExpr) -> int:
    """Output axes a plan may partition (not pinned by the layout rules)."""
    pinned = pinned_axes(expr)
    return sum(1 for a in expr.axes if not a.reduce and a.name not in pinned)


def _only_sum_reduction(out: te.Tensor) -> te.Tensor | None:
    """The one sum reduction that the elementwise stages ending in ``out`` read, if exactly one."""
    if not isinstance(out.op, te.ComputeOp) or isinstance(body_of(out), tirx.Reduce):
        return None
    found: list[te.Tensor] = []
    stack, seen = [out], set()
    while stack:
        t = stack.pop()
        if _key(t.op) in seen or not isinstance(t.op, te.ComputeOp):
            continue
        seen.add(_key(t.op))
        body = body_of(t)
        if isinstance(body, tirx.Reduce) and t is not out:
            if not any(same_tensor(t, f) for f in found):
                found.append(t)
            continue
        stack.extend(t.op.input_tensors)
    if len(found) != 1 or reduction_combiner(body_of(found[0]), found[0]) != "sum":
        return None
    return found[0]
