"""Sub-operators and combines as ordinary tensor expressions.

An operator split along one of its axes (:mod:`tvm_icca.split`) becomes sub-operators, each
the same expression over a block ``[start, start + length)`` of that axis
(:func:`sub_expression`), plus at most one operator that joins their results:

* along a **spatial** axis the pieces are independent and each writes a block of the output;
  a reader that cannot take the pieces one by one reads them joined by :func:`concat_expression`
  (piecewise reads, the same expression ``relax.concat`` lowers to);
* along a top-level **reduction** axis each piece writes a partial result over its block of the
  reduction, and :func:`combine_expression` reduces the partials with the operator's own
  combiner (sum, max or min, which are associative: the result is the operator's) and applies
  the operator's epilogue once, to the combined value (a bias is added once, not per piece).

A piece reads every input indexed by the split axis through a
:class:`~runtime_sim.contract.expr.TensorView` of its block (an HBM tensor is not copied), or
reads the corresponding piece of a split producer directly. Nothing here plans or costs: the
pieces are planned like any other operator.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from runtime_sim.contract.expr import (
    AffineIndex,
    Axis,
    Expr,
    TensorAccess,
    TensorExpr,
    TensorView,
    make_load,
    renumber_loads,
    walk_expr,
)

#: The elementwise combinator of each reduction combiner (:data:`REDUCE_COMBINERS`).
COMBINE_OPS = {"sum": "add", "max": "max", "min": "min"}


def split_blocks(extent: int, pieces: int) -> tuple[tuple[int, int], ...]:
    """``pieces`` near-equal ``(start, length)`` blocks covering ``[0, extent)``, longer first."""
    base, extra = divmod(int(extent), int(pieces))
    blocks, start = [], 0
    for k in range(int(pieces)):
        length = base + (1 if k < extra else 0)
        blocks.append((start, length))
        start += length
    return tuple(blocks)


def split_dims(access: TensorAccess, axis: str) -> tuple[int, ...] | None:
    """The dimensions of ``access`` indexed by ``axis``; ``None`` unless each is exactly
    ``axis`` (coefficient 1, no offset): a compound index (a convolution window, a concat's
    shifted read) cannot be cut into blocks of the axis."""
    dims = []
    for d, index in enumerate(access.indices):
        if axis in index.axes:
            if not index.is_simple:
                return None
            dims.append(d)
    return tuple(dims)


def piece_inputs_of(expr: TensorExpr, axis: str) -> dict[int, int]:
    """Which inputs of ``expr`` a piece along ``axis`` reads: input index -> the piece's
    input index. A cut along a reduction leaves the epilogue to the combine, so the pieces do
    not read the epilogue's inputs; any other cut keeps every input in place."""
    reduce = any(a.name == axis and a.reduce for a in expr.axes)
    dropped = set(expr.epilogue_inputs) if reduce and expr.epilogue is not None else set()
    kept = [t for t in range(len(expr.inputs)) if t not in dropped]
    return {old: new for new, old in enumerate(kept)}


def why_not_splittable(expr: TensorExpr, axis: str) -> str | None:
    """Why ``expr`` cannot be cut along ``axis`` into sub-operators, or ``None`` if it can."""
    top = {a.name: a for a in expr.axes}
    if axis not in top:
        return f"'{axis}' is not a top-level axis (a core-local reduction keeps whole rows)"
    if axis in expr.merged_inner_axes or any(len(ix.terms) > 1 and axis in ix.axes
                                             for ix in expr.output.indices):
        return f"'{axis}' is merged into an output dimension"
    for t, access in enumerate(expr.inputs):
        dims = split_dims(access, axis)
        if dims is None:
            return f"input '{access.name}' is read through a compound index of '{axis}'"
        if dims and access.gather is not None:
            return f"gathered input '{access.name}' is indexed by '{axis}'"
        for root in (expr.body, expr.epilogue):
            for node in walk_expr(root) if root is not None else ():
                if node.get("op") == "load" and node.get("input") == t:
                    read = [AffineIndex.from_dict(i) for i in node["index"]]
                    if any(axis in read[d].axes and not read[d].is_simple for d in range(len(read))) \
                            or any(axis not in read[d].axes for d in dims):
                        return f"input '{access.name}' is read at another index of '{axis}'"
    # a fused attention's keys are cut into blocks joined by the online softmax
    # (tvm_icca.split.attention_keys), not by a combiner of the partial results
    attention_keys = expr.kind == "attention" and expr.combiner == "softmax"
    if top[axis].reduce and expr.combiner not in COMBINE_OPS and not attention_keys:
        return f"its reduction combines with '{expr.combiner}'"
    return None


def sub_expression(expr: TensorExpr, axis: str, start: int, length: int, output_name: str,
                   piece_inputs: Mapping[int, str] = {}, whole: bool = False) -> TensorExpr:
    """``expr`` over the block ``[start, start + length)`` of ``axis``.

    Inputs indexed by ``axis`` are read through a view of that block (composed with a view
    they already had), except those in ``piece_inputs`` (input -> tensor name), which are
    already the block: a split producer's piece. Where the body reads the value of ``axis``
    (a causal mask's ``j > i``) it reads ``axis + start``, the position in the operator.
    Along a reduction axis the output is the partial reduction: the epilogue and the inputs
    only it reads are left to :func:`combine_expression`; unless ``whole``: the block holds
    every term that is not exactly zero (a fused attention's visible keys,
    :mod:`tvm_icca.split.visible_keys`), and the piece is the operator itself, epilogue and
    all. Call :func:`why_not_splittable` first.
    """
    top = {a.name: a for a in expr.axes}
    reduce = top[axis].reduce and not whole
    inputs = []
    for t, access in enumerate(expr.inputs):
        dims = split_dims(access, axis) or ()
        if not dims:
            inputs.append(access)
            continue
        shape = tuple(length if d in dims else n for d, n in enumerate(access.shape))
        if t in piece_inputs:
            inputs.append(replace(access, name=piece_inputs[t], shape=shape, view=None))
            continue
        base = access.view
        origin = base.start if base is not None else (0,) * len(access.shape)
        view = TensorView(tuple(o + (start if d in dims else 0) for d, o in enumerate(origin)),
                          access.tensor_shape)
        inputs.append(replace(access, shape=shape, view=view))
    axes = tuple(replace(a, extent=length) if a.name == axis else a for a in expr.axes)
    out_dims = split_dims(expr.output, axis) or ()
    out_shape = tuple(length if d in out_dims else n for d, n in enumerate(expr.output.shape))
    output = replace(expr.output, name=output_name, shape=out_shape)
    shifted = {} if not start else {axis: start}
    piece = replace(expr, axes=axes, inputs=tuple(inputs), output=output,
                    body=shift_axis_values(expr.body, shifted),
                    epilogue=None if expr.epilogue is None else shift_axis_values(expr.epilogue, shifted))
    if not reduce or expr.epilogue is None:
        return piece
    renumber = piece_inputs_of(expr, axis)
    kept_inputs = tuple(inputs[t] if inputs[t].gather is None else
                        replace(inputs[t], gather=replace(inputs[t].gather, ids=renumber[inputs[t].gather.ids]))
                        for t in renumber)
    return replace(piece, inputs=kept_inputs, epilogue=None, epilogue_inputs=(),
                   body=renumber_loads(expr.body, renumber))


def combine_expression(expr: TensorExpr, partials: Sequence[str]) -> TensorExpr:
    """The operator that joins the partial results of ``expr`` split along a reduction
    axis: the combiner over ``partials`` (tensors of the output's shape), then ``expr``'s
    epilogue, reading its epilogue inputs as ``expr`` does. An elementwise operator over the
    output's axes."""
    out = expr.output
    spatial = tuple(a for a in expr.axes if not a.reduce)
    part_accesses = tuple(replace(out, name=name) for name in partials)
    joined = fold(COMBINE_OPS[expr.combiner], [make_load(k, out.indices) for k in range(len(partials))])
    epi_inputs, body = renumbered_epilogue(expr, joined, len(partials))
    return TensorExpr("elementwise", spatial, part_accesses + epi_inputs, out, body)


def fold(op: str, terms: Sequence[Expr]) -> Expr:
    """``terms`` joined left to right by the binary ``op`` (``((t0 op t1) op t2) ...``)."""
    acc = terms[0]
    for term in terms[1:]:
        acc = {"op": op, "args": [acc, term]}
    return acc


def renumbered_epilogue(expr: TensorExpr, value: Expr, first: int) -> tuple[tuple[TensorAccess, ...], Expr]:
    """``expr``'s epilogue applied to ``value`` in an operator whose inputs before ``first``
    are others: the epilogue's inputs (to append at ``first``) and the body. Without an
    epilogue, no inputs and ``value`` itself."""
    if expr.epilogue is None:
        return (), value
    renumber = {t: first + k for k, t in enumerate(expr.epilogue_inputs)}
    return (tuple(expr.inputs[t] for t in expr.epilogue_inputs),
            _replace_result(renumber_loads(expr.epilogue, renumber), value))


def concat_expression(output: TensorAccess, dim: int, pieces: Sequence[tuple[str, int, int]]
                      ) -> TensorExpr:
    """The operator that writes ``output`` from ``pieces`` (name, start, length) that cover
    its dimension ``dim``: piece ``k`` is read at ``axis - start_k`` where the axis is in its
    block (a piecewise read: the device reads nothing outside a piece's block)."""
    names = [f"c{d}" for d in range(len(output.shape))]
    axes = tuple(Axis(n, int(s)) for n, s in zip(names, output.shape))
    out = replace(output, indices=tuple(AffineIndex.of_axis(n) for n in names), view=None)
    accesses, loads = [], []
    for name, start, length in pieces:
        index = tuple(AffineIndex(((n, 1),), -start if d == dim else 0) for d, n in enumerate(names))
        shape = tuple(length if d == dim else s for d, s in enumerate(output.shape))
        accesses.append(TensorAccess(name, shape, output.dtype, index))
        loads.append(make_load(len(loads), index))
    body = loads[-1]
    for k in range(len(pieces) - 2, -1, -1):
        end = pieces[k][1] + pieces[k][2]
        cond = {"op": "lt", "args": [{"op": "axis", "axis": names[dim]}, {"op": "const", "value": end}]}
        body = {"op": "select", "args": [cond, loads[k], body]}
    return TensorExpr("elementwise", axes, tuple(accesses), out, body)


def shift_axis_values(node: Expr, starts: Mapping[str, int]) -> Expr:
    """``node`` with every read of an axis's value ``a`` in ``starts`` replaced by
    ``a + starts[a]`` (a piece's axis runs from 0; the expression meant the operator's)."""
    if not starts:
        return node
    if node.get("op") == "axis" and node.get("axis") in starts:
        return {"op": "add", "args": [dict(node), {"op": "const", "value": int(starts[node["axis"]])}]}
    if "args" not in node:
        return node
    return {**node, "args": [shift_axis_values(a, starts) for a in node["args"]]}


def _replace_result(node: Expr, value: Expr) -> Expr:
    if node.get("op") == "result":
        return value
    if "args" not in node:
        return dict(node)
    return {**node, "args": [_replace_result(a, value) for a in node["args"]]}
