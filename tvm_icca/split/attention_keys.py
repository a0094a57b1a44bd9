"""A fused attention operator cut along its keys: attention per block and the online combine.

Cut along its batch axes, its queries or its value features, an operator of kind
``"attention"`` is attention per piece (:func:`tvm_icca.split.pieces.sub_expression`). Cut
along the keys ``j``, each block normalizes over its own keys only, so the blocks must be
rescaled to the whole row, as split-KV decoding does (FlashDecoding, Dao et al. 2023; the
online softmax of Milakov & Gimelshein 2018). Block ``k`` runs as three ordinary operators:

* ``O_k``: the attention over the block (normalized by the block's own sum);
* ``m_k = max_j score``: a reduction over the block's keys (the score recomputed);
* ``l_k = sum_j exp(score - m_k)``: the block's sum, the score recomputed once more;

and :func:`tvm_icca.split.online_softmax.combine_blocks` joins them exactly:
``M = max_k m_k``, ``O = sum_k exp(m_k - M) l_k O_k / sum_k exp(m_k - M) l_k``. The
statistics recompute the block's scores (twice the ``Q K^T`` work of the block) rather
than have the attention operator write its running statistics, which the program format
keeps inside the operator (its ``o``, ``m``, ``l`` never leave the cores as tensors).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from runtime_sim.contract.expr import (
    Axis,
    TensorAccess,
    TensorExpr,
    make_load,
    renumber_loads,
    walk_expr,
)
from tvm_icca.lower.region import PendingOp
from tvm_icca.split.online_softmax import BlockStatistics, combine_blocks
from tvm_icca.split.pieces import sub_expression

__all__ = ["attention_key_blocks", "key_axis"]


def key_axis(expr: TensorExpr) -> str | None:
    """The keys' axis of a fused attention operator (its one reduction), else ``None``."""
    if expr.kind != "attention" or expr.combiner != "softmax":
        return None
    keys = [a.name for a in expr.axes if a.reduce]
    return keys[0] if len(keys) == 1 else None


def attention_key_blocks(op: PendingOp, blocks: Sequence[tuple[int, int]],
                         piece_inputs: Mapping[int, Sequence[str]] = {}
                         ) -> list[tuple[tuple[int, int, int], PendingOp]]:
    """The operators computing attention ``op``'s output from key ``blocks`` of
    ``(start, length)``, each keyed ``(block, operator, sub-step)`` for the region's
    dependency order (the combine's block is ``len(blocks)``).

    ``piece_inputs``: inputs of ``op`` that exist as pieces along the same blocks (input ->
    names per block, e.g. keys projected piece by piece); the others are read as views.
    """
    expr = op.expr
    j = key_axis(expr)
    if j is None:
        raise ValueError(f"{op.describe()} is not a fused attention operator")
    score = expr.body["args"][0]
    read = sorted({n["input"] for n in walk_expr(score) if n.get("op") == "load"})
    value_axes = {a.name for a in expr.axes if not a.reduce} - {
        a for n in walk_expr(score) if n.get("op") == "load" for i in n["index"] for a, _ in i["terms"]}
    out = expr.output
    row_dims = [d for d, i in enumerate(out.indices) if not set(i.axes) & value_axes]
    stat_shape = tuple(out.shape[d] for d in row_dims)
    stat_index = tuple(out.indices[d] for d in row_dims)
    row_axes = tuple(a for a in expr.axes if not a.reduce and a.name not in value_axes)
    n = len(blocks)
    ops: list[tuple[tuple[int, int, int], PendingOp]] = []
    m_names, l_names, o_names = [], [], []
    for k, (start, length) in enumerate(blocks):
        renames = {t: names[k] for t, names in piece_inputs.items()}
        o_name = f"{op.output_name}.online.p{k}"
        piece = sub_expression(expr, j, start, length, o_name, renames)
        inputs = tuple(renames.get(t, op.input_names[t]) for t in range(len(expr.inputs)))
        part = f"{op.label or expr.kind} (online, block {k + 1}/{n})"
        ops.append(((k, 1, 0), PendingOp(f"{op.name}.online.p{k}", piece, inputs, o_name,
                                         f"{op.label or expr.kind} (part {k + 1}/{n})")))
        # the statistics read what the score reads, as the piece reads it
        new_of = {t: s for s, t in enumerate(read)}
        accesses = tuple(piece.inputs[t] for t in read)
        names = tuple(inputs[t] for t in read)
        axes = row_axes + (Axis(j, length, reduce=True),)
        block_score = renumber_loads(score, new_of)
        m_k = TensorAccess(f"{op.output_name}.max.p{k}", stat_shape, out.dtype, stat_index)
        l_k = replace(m_k, name=f"{op.output_name}.sum.p{k}")
        ops.append(((k, 0, 0), PendingOp(
            f"{op.name}.online.p{k}.max",
            TensorExpr("reduce", axes, accesses, m_k, block_score, local_axes=expr.local_axes,
                       combiner="max"), names, m_k.name, f"{part} maximum")))
        shifted = {"op": "exp", "args": [{"op": "sub", "args": [
            block_score, make_load(len(accesses), stat_index)]}]}
        ops.append(((k, 0, 1), PendingOp(
            f"{op.name}.online.p{k}.sum",
            TensorExpr("reduce", axes, accesses + (m_k,), l_k, shifted, local_axes=expr.local_axes),
            names + (m_k.name,), l_k.name, f"{part} sum")))
        m_names.append(m_k.name)
        l_names.append(l_k.name)
        o_names.append(o_name)
    stats = BlockStatistics(row_axes, stat_shape, stat_index, stat_index, out.dtype,
                            f"{op.output_name}.max", f"{op.name}.online.max",
                            f"{op.label or expr.kind} (online, maximum of {n} blocks)")
    return ops + combine_blocks(stats, op, m_names, l_names, o_names, normalized=True)
