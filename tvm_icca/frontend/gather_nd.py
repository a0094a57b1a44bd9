"""GatherND by a constant outer-product table as one take per axis, before partitioning.

ONNX ``GatherND`` (``batch_dims`` 0; ``relax.gather_nd`` after TVM's importer) reads, for
indices of shape ``[*B, K]``, ``out[b, ...] = data[idx[b, 0], ..., idx[b, K-1], ...]`` (ONNX
operator specification, ``GatherND``): a gather of whole slices of ``data`` by rows of
``K`` coordinates, which no affine index map (T10 §5) and no single-axis gather expresses.

PyTorch's dynamo exporter writes advanced indexing by broadcast index vectors,
``x[..., ih[:, None], iw[None, :]]`` (what it makes of ``aten._unsafe_index``, e.g. for
``F.interpolate(mode="nearest-exact")``), as a ``Transpose`` of the indexed axes to the
front, a ``GatherND`` by a constant ``[H_out, W_out, 2]`` table and a ``Transpose`` back. Such
a table is an outer product: with ``len(B) == K``, coordinate ``k`` depends on axis ``k`` of
``B`` only, ``idx[b, k] = t_k[b_k]``. Then

``gather_nd(data, idx) = take(... take(take(data, t_0, axis=0), t_1, axis=1) ..., t_{K-1}, axis=K-1)``,

each take a gathered read the chip runs exactly (:mod:`tvm_icca.ops.gather`).
:class:`GatherNDAsTakes` rewrites every ``gather_nd`` whose indices are such a constant (after
``FoldConstant``: the importer computes ``where(idx < 0, idx + n, idx)`` from it); any other
stays on the host with the reason :func:`gather_nd_reason` gives.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.dpl import is_op, rewrite_call, wildcard

__all__ = ["GatherNDAsTakes", "gather_nd_as_takes", "gather_nd_reason", "outer_product_tables"]

_OP = "relax.gather_nd"


def outer_product_tables(indices: np.ndarray) -> list[np.ndarray] | None:
    """The per-axis tables ``t_k`` of an index array ``[*B, K]`` with ``len(B) == K`` whose
    coordinate ``k`` depends on axis ``k`` of ``B`` only (``idx[b, k] == t_k[b_k]``), else
    ``None``."""
    if indices.ndim < 2 or indices.shape[-1] != indices.ndim - 1 or indices.size == 0:
        return None
    rank = indices.ndim - 1
    tables = []
    for k in range(rank):
        # coordinate k along axis k of B, at position 0 of every other axis
        table = indices[tuple(slice(None) if a == k else 0 for a in range(rank)) + (k,)]
        shape = [1] * rank
        shape[k] = len(table)
        if not np.array_equal(indices[..., k], np.broadcast_to(table.reshape(shape), indices.shape[:-1])):
            return None
        tables.append(table)
    return tables


def _static_shape(expr: relax.Expr) -> list[int] | None:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr) \
            or not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
        return None
    return [int(d) for d in ty.shape.values]


def _read(call: relax.Call) -> tuple[relax.Expr, list[np.ndarray]] | str:
    """The data and per-axis tables of the ``gather_nd`` ``call``, or why it stays as it is."""
    data, indices = call.args
    if int(call.attrs.batch_dims) != 0:
        return f"gather_nd with batch_dims={int(call.attrs.batch_dims)} (rewritten: batch_dims 0)"
    if not isinstance(indices, tvm.ir.GenericConst):
        return ("gather_nd by computed indices: only a constant table whose coordinates form an "
                "outer product (one per axis) becomes takes")
    shape = _static_shape(data)
    if shape is None:
        return "gather_nd of a tensor with a dynamic shape"
    tables = outer_product_tables(indices.value.numpy())
    if tables is None:
        return ("gather_nd by a constant table that is not an outer product of one index "
                "vector per axis (indices [*B, K] with len(B) == K, coordinate k varying along "
                "axis k only)")
    for axis, table in enumerate(tables):
        if np.any((table < -shape[axis]) | (table >= shape[axis])):
            return f"gather_nd with an index out of range of axis {axis} (size {shape[axis]})"
    return data, [np.where(t < 0, t + n, t) for t, n in zip(tables, shape)]


def gather_nd_reason(call: relax.Call) -> str | None:
    """Why the ``relax.gather_nd`` ``call`` stays on the host, or ``None`` when
    :func:`gather_nd_as_takes` rewrites it into takes the chip runs."""
    read = _read(call)
    return read if isinstance(read, str) else None


def gather_nd_as_takes(call: relax.Call) -> relax.Expr | None:
    """The ``gather_nd`` ``call`` as one take per indexed axis (see the module), or ``None``
    when it stays as it is (:func:`gather_nd_reason` says why)."""
    read = _read(call)
    if isinstance(read, str):
        return None
    x, tables = read
    for axis, table in enumerate(tables):
        x = relax.op.take(x, relax.const(np.ascontiguousarray(table, dtype=np.int32)), axis=axis)
    return x


@tvm.transform.module_pass(opt_level=0, name="icca.GatherNDAsTakes")
class GatherNDAsTakes:
    """Rewrite every ``relax.gather_nd`` that :func:`gather_nd_reason` accepts into the takes
    of :func:`gather_nd_as_takes`. Run it after ``FoldConstant`` and before
    ``FuseOpsByPattern``."""

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        pattern = is_op(_OP)(wildcard(), wildcard())

        def rewrite(orig: relax.Expr, _: dict) -> relax.Expr:
            if not isinstance(orig, relax.Call):
                return orig
            out = gather_nd_as_takes(orig)
            return orig if out is None else out

        for gvar, func in list(mod.functions_items()):
            if isinstance(func, relax.Function):
                new = rewrite_call(pattern, rewrite, func)
                if not new.same_as(func):
                    mod[gvar] = new
        return mod
