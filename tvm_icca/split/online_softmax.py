"""Attention cut along its keys: per-block softmax statistics and the online-softmax combine.

When the scores ``S`` of ``softmax(S) V`` exist as blocks along the keys (a long KV cache
split by :mod:`tvm_icca.split`), the softmax cannot read them one by one: it normalizes over
the whole row. Joining the blocks would put whole rows back on the cores. Instead, each block
``k`` runs on its own, as split-KV decoding does (FlashDecoding, Dao et al. 2023):

* ``m_k = max_j S_k``, ``e_k = exp(S_k - m_k)``, ``l_k = sum_j e_k`` and ``o_k = e_k V_k``
  (``V_k``: the block of ``V`` along the same keys, read in place);

and one operator combines the blocks exactly (the online softmax of Milakov & Gimelshein 2018):

* ``M = max_k m_k`` and ``out = sum_k exp(m_k - M) o_k / sum_k exp(m_k - M) l_k``:
  ``exp(m_k - M)`` rescales each block's partial output and sum to the common maximum.

Mathematically this is ``softmax(S) V``; numerically each block's exponent is shifted by its
own maximum, so no term overflows. Every operator is an ordinary one (a reduce, an
elementwise or a matmul piece); nothing here plans.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from runtime_sim.contract.expr import AffineIndex, Axis, Expr, TensorAccess, TensorExpr, make_load
from tvm_icca.lower.region import PendingOp
from tvm_icca.split.pieces import (
    fold,
    piece_inputs_of,
    renumbered_epilogue,
    split_dims,
    sub_expression,
)


@dataclass(frozen=True)
class OnlineSoftmax:
    """The operators that replace ``softmax`` and its reader ``pv`` over key blocks, each
    with its place in the block order: ``(block, operator, sub-step)`` where ``operator`` is
    0 for the softmax's statistics and 1 for the product and combine (the block count for
    the combine)."""

    ops: tuple[tuple[tuple[int, int, int], PendingOp], ...]


def row_softmax_axis(expr: TensorExpr) -> str | None:
    """The axis ``expr`` normalizes over, if it is ``softmax`` of its one input over that
    axis (the last, read plainly): ``exp(x - max x) / sum exp(x - max x)``; else ``None``."""
    if expr.kind != "softmax" or len(expr.inputs) != 1 or expr.epilogue is not None:
        return None
    index = expr.inputs[0].indices
    if not expr.axes or any(not i.is_simple for i in index) or \
            tuple(i.terms[0][0] for i in index) != tuple(a.name for a in expr.axes):
        return None
    row = expr.axes[-1].name
    body = expr.body

    def load_at(node: Expr, axis: str) -> bool:
        want = [AffineIndex.of_axis(a.name).to_dict() for a in expr.axes[:-1]]
        return (node.get("op") == "load" and node.get("input") == 0
                and node.get("index") == want + [AffineIndex.of_axis(axis).to_dict()])

    def row_max(node: Expr) -> bool:
        return (node.get("op") == "reduce" and node.get("combiner") == "max"
                and len(node.get("axes", ())) == 1 and load_at(node["args"][0], node["axes"][0]))

    def shifted_exp(node: Expr, axis: str) -> bool:
        if node.get("op") != "exp" or node["args"][0].get("op") != "sub":
            return False
        x, m = node["args"][0]["args"]
        return load_at(x, axis) and row_max(m)

    if body.get("op") != "div":
        return None
    num, den = body["args"]
    ok = (shifted_exp(num, row) and den.get("op") == "reduce" and den.get("combiner") == "sum"
          and len(den.get("axes", ())) == 1 and shifted_exp(den["args"][0], den["axes"][0]))
    return row if ok else None


def online_softmax(softmax: PendingOp, pv: PendingOp, scores: Sequence[str],
                   blocks: Sequence[tuple[int, int]],
                   value_pieces: dict[int, tuple[int, Sequence[str]]]) -> OnlineSoftmax | None:
    """The operators computing ``pv``'s output from the score blocks ``scores`` (along the
    softmax's row, ``blocks`` of ``(start, length)``), or ``None`` if ``pv`` is not a product
    that sums the softmax's output over that row.

    ``value_pieces``: inputs of ``pv`` that exist as pieces along the same blocks (input ->
    (dimension cut, names per block)); the others are read as views of their blocks.
    """
    row = row_softmax_axis(softmax.expr)
    if row is None or softmax.output_name not in pv.input_names:
        return None
    t_p = pv.input_names.index(softmax.output_name)
    if pv.input_names.count(softmax.output_name) != 1 or t_p in pv.expr.epilogue_inputs:
        return None
    access = pv.expr.inputs[t_p]
    key = access.indices[-1]
    if any(not i.is_simple for i in access.indices) or access.view is not None:
        return None
    axis = key.terms[0][0]
    if axis not in pv.expr.reduce_axes or split_dims(access, axis) != (len(access.indices) - 1,):
        return None
    if any(split_dims(pv.expr.inputs[t], axis) != (dim,) for t, (dim, _) in value_pieces.items()):
        return None
    spatial = softmax.expr.axes[:-1]
    s_in = softmax.expr.inputs[0]
    stat_shape = s_in.shape[:-1]
    stat_index = tuple(AffineIndex.of_axis(a.name) for a in spatial)
    # the statistics as the product reads them: the softmax's leading dims, in pv's axes
    pv_stat_index = access.indices[:-1]
    dtype = s_in.dtype
    n = len(blocks)
    ops: list[tuple[tuple[int, int, int], PendingOp]] = []
    m_names, l_names, o_names = [], [], []
    for k, ((start, length), s_name) in enumerate(zip(blocks, scores)):
        tag = f"{softmax.name}.online.p{k}"
        axes = spatial + (Axis(row, length),)
        s_k = replace(s_in, name=s_name, shape=stat_shape + (length,), view=None)
        m_k = TensorAccess(f"{softmax.output_name}.max.p{k}", stat_shape, dtype, stat_index)
        e_k = TensorAccess(f"{softmax.output_name}.exp.p{k}", s_k.shape, dtype,
                           tuple(AffineIndex.of_axis(a.name) for a in axes))
        l_k = replace(m_k, name=f"{softmax.output_name}.sum.p{k}")
        reduced = spatial + (Axis(row, length, reduce=True),)
        label = _label(softmax, k, n)
        ops.append(((k, 0, 0), PendingOp(
            f"{tag}.max", TensorExpr("reduce", reduced, (s_k,), m_k, make_load(0, s_k.indices),
                                     combiner="max"), (s_name,), m_k.name, f"{label} maximum")))
        shifted = {"op": "exp", "args": [{"op": "sub", "args": [make_load(0, s_k.indices),
                                                                  make_load(1, stat_index)]}]}
        ops.append(((k, 0, 1), PendingOp(
            f"{tag}.exp", TensorExpr("elementwise", axes, (s_k, m_k), e_k, shifted),
            (s_name, m_k.name), e_k.name, f"{label} exponent")))
        ops.append(((k, 0, 2), PendingOp(
            f"{tag}.sum", TensorExpr("reduce", reduced, (e_k,), l_k, make_load(0, e_k.indices)),
            (e_k.name,), l_k.name, f"{label} sum")))
        o_name = f"{pv.output_name}.online.p{k}"
        renames = {t_p: e_k.name, **{t: names[k] for t, (_, names) in value_pieces.items()}}
        o_expr = sub_expression(pv.expr, axis, start, length, o_name, renames)
        inputs = tuple(renames.get(t, pv.input_names[t]) for t in piece_inputs_of(pv.expr, axis))
        ops.append(((k, 1, 0), PendingOp(f"{pv.name}.online.p{k}", o_expr, inputs, o_name,
                                         f"{pv.label or pv.expr.kind} (part {k + 1}/{n})")))
        m_names.append(m_k.name)
        l_names.append(l_k.name)
        o_names.append(o_name)
    ops += _combine(softmax, pv, m_names, l_names, o_names, stat_shape, dtype, stat_index,
                    pv_stat_index, n)
    return OnlineSoftmax(tuple(ops))


def _combine(softmax: PendingOp, pv: PendingOp, m_names: list[str], l_names: list[str],
             o_names: list[str], stat_shape: tuple[int, ...], dtype: str,
             stat_index: tuple[AffineIndex, ...], pv_stat_index: tuple[AffineIndex, ...],
             n: int) -> list[tuple[tuple[int, int, int], PendingOp]]:
    """``M = max_k m_k``, then ``pv``'s output from the blocks' partial outputs and sums
    rescaled to ``M``, then ``pv``'s epilogue."""
    stats = BlockStatistics(softmax.expr.axes[:-1], stat_shape, stat_index, pv_stat_index, dtype,
                            f"{softmax.output_name}.max", f"{softmax.name}.online.max",
                            f"{softmax.label or 'softmax'} (online, maximum of {n} blocks)")
    return combine_blocks(stats, pv, m_names, l_names, o_names, normalized=False)


@dataclass(frozen=True)
class BlockStatistics:
    """Where the per-block row statistics ``m_k``, ``l_k`` of an online softmax live: over
    the row axes ``axes`` (shape ``shape``, written at ``index``), read by the combined
    operator at ``reader_index`` (its own axes); the common maximum ``M`` is tensor
    ``max_name``, written by operator ``max_op`` (labelled ``max_label``)."""

    axes: tuple[Axis, ...]
    shape: tuple[int, ...]
    index: tuple[AffineIndex, ...]
    reader_index: tuple[AffineIndex, ...]
    dtype: str
    max_name: str
    max_op: str
    max_label: str


def combine_blocks(stats: BlockStatistics, base: PendingOp, m_names: Sequence[str],
                   l_names: Sequence[str], o_names: Sequence[str], normalized: bool
                   ) -> list[tuple[tuple[int, int, int], PendingOp]]:
    """The online-softmax combine of ``n`` key blocks into ``base``'s output: ``M = max_k
    m_k``, then ``sum_k exp(m_k - M) o_k / sum_k exp(m_k - M) l_k`` and ``base``'s
    epilogue. ``o_k`` is block ``k``'s partial product ``e_k V_k``, or, when ``normalized``,
    its normalized output ``e_k V_k / l_k`` (a fused attention's piece), rescaled by ``l_k``.
    Keyed ``(n, 1, 0)`` and ``(n, 1, 1)`` for the region's dependency order."""
    n = len(m_names)
    top = TensorAccess(stats.max_name, stats.shape, stats.dtype, stats.index)
    body = fold("max", [make_load(k, stats.index) for k in range(n)])
    partial = tuple(TensorAccess(name, stats.shape, stats.dtype, stats.index) for name in m_names)
    out: list[tuple[tuple[int, int, int], PendingOp]] = [((n, 1, 0), PendingOp(
        stats.max_op, TensorExpr("elementwise", stats.axes, partial, top, body),
        tuple(m_names), top.name, stats.max_label))]

    expr = base.expr
    result = expr.output
    at = stats.reader_index

    def statistic(name: str) -> TensorAccess:  # a row statistic as the product's rows read it
        return TensorAccess(name, stats.shape, stats.dtype, at)

    accesses = ([statistic(top.name)] + [statistic(m) for m in m_names]
                + [statistic(s) for s in l_names] + [replace(result, name=o) for o in o_names])

    def scale(k: int) -> Expr:  # exp(m_k - M)
        return {"op": "exp", "args": [{"op": "sub", "args": [make_load(1 + k, at),
                                                               make_load(0, at)]}]}

    def weight(k: int) -> Expr:  # what o_k is multiplied by: exp(m_k - M) [l_k]
        if not normalized:
            return scale(k)
        return {"op": "mul", "args": [scale(k), make_load(1 + n + k, at)]}

    num = fold("add", [{"op": "mul", "args": [weight(k), make_load(1 + 2 * n + k, result.indices)]}
                       for k in range(n)])
    den = fold("add", [{"op": "mul", "args": [scale(k), make_load(1 + n + k, at)]}
                       for k in range(n)])
    value = {"op": "div", "args": [num, den]}
    epi_inputs, value = renumbered_epilogue(expr, value, len(accesses))
    names = (top.name, *m_names, *l_names, *o_names,
             *(base.input_names[t] for t in expr.epilogue_inputs if expr.epilogue is not None))
    combined = TensorExpr("elementwise", tuple(a for a in expr.axes if not a.reduce),
                          tuple(accesses) + epi_inputs, result, value)
    out.append(((n, 1, 1), PendingOp(f"{base.name}.combine", combined, names, base.output_name,
                                     f"{base.label or base.expr.kind} (online softmax of {n} blocks)")))
    return out


def _label(op: PendingOp, k: int, n: int) -> str:
    return f"{op.label or 'softmax'} (online, block {k + 1}/{n})"
