"""Fused attention (``icca.attention``) as a tensor expression of kind ``"attention"``.

The composite ``matmul(softmax(score(Q, K)) [casts], V)`` (:mod:`tvm_icca.ops.attention`) has
the TE TVM's legalization gives each of its ops (:func:`tvm_icca.ops.te_capture.compose_te`):
the product is a sum over the keys ``j`` of ``P[.., i, j] * V[.., j, d]``, ``P`` the
softmax's stages over the scores ``S``. The expression keeps the product's axes (the
batch axes, ``i``, ``d`` and the reduction ``j``) and replaces the read of ``P`` by the pair
the device evaluates with the online softmax::

    body = {"op": "attention", "args": [score, value]}
    O[.., i, d] = sum_j exp(s_ij - m_i) value_jd / sum_j exp(s_ij - m_i)

``score`` is ``S`` read at the index the product reads ``P`` at, converted by the same walk
as every other operator (:class:`tvm_icca.lower.te_converter.TEConverter`): ``Q K^T`` becomes
a core-local sum over the head dimension ``k``, the scale, soft-cap and mask the elementwise
ops around it. Factors of that sum that do not read ``k`` (the ``sqrt(scale)`` the SDPA
decompositions put on each operand) move out of it, so the sum is the plain product of a
``Q`` and a ``K`` read. ``value`` is the other factor of the product. The inputs are
ordered ``(Q, K, V, *extra)``. Casts of the probabilities before the product (Hugging
Face's ``.to(query.dtype)`` after a float32 softmax, up to
:data:`~tvm_icca.ops.attention.MAX_PROBS_CASTS` of them) are not applied: the device computes
the normalized product in float32 and rounds once, to the output's dtype.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from tvm import relax, te

from runtime_sim.contract.errors import UnsupportedOperatorError
from runtime_sim.contract.expr import (
    AffineIndex,
    Axis,
    Expr,
    TensorAccess,
    TensorExpr,
    renumber_loads,
    walk_expr,
)
from runtime_sim.contract.hardware import check_dtype
from tvm_icca.lower.te_converter import InputSource, TEConverter
from tvm_icca.lower.te_nodes import body_of, reduction_combiner, same_tensor
from tvm_icca.ops.attention import ATTENTION_COMPOSITE
from tvm_icca.ops.extracted_op import ExtractedOp
from tvm_icca.ops.masks import canonical_mask
from tvm_icca.ops.te_capture import ComposedTE
from tvm_icca.ops.te_capture import ffi_key as _key
from tvm_icca.ops.te_capture import function_label as _func_label

__all__ = ["attention_op", "is_attention"]

_PROBS = "attention.probabilities"  # stands for the read of P until it is replaced


def is_attention(func: relax.Function) -> bool:
    """Whether ``func`` is an ``icca.attention`` composite."""
    composite = (func.attrs or {}).get("Composite")
    return composite is not None and str(composite).rsplit(".", 1)[-1] == ATTENTION_COMPOSITE


class _AttentionConverter(TEConverter):
    """A converter that stops at the softmax's output ``P`` and records where it is read."""

    def __init__(self, sources: Mapping[int, InputSource], probs: te.Tensor) -> None:
        super().__init__(sources)
        self.probs = probs
        self.prob_reads: list[list[Any]] = []

    def _load(self, tensor: te.Tensor, index: list) -> Expr:
        if same_tensor(tensor, self.probs):
            self.prob_reads.append(list(index))
            return {"op": _PROBS}
        return super()._load(tensor, index)


def attention_op(func: relax.Function, composed: ComposedTE,
                 sources: Mapping[int, InputSource], name: str = "out") -> ExtractedOp:
    """The tensor expression of the ``icca.attention`` composite ``func``.

    ``composed`` is its TE (:func:`tvm_icca.ops.te_capture.compose_te`) and ``sources``
    where each TE placeholder's data comes from. Raises
    :class:`~runtime_sim.contract.errors.UnsupportedOperatorError` when the TE is not
    ``softmax_j(score) @ value`` (the partition check, :func:`tvm_icca.ops.attention.attention_reason`,
    keeps such a chain from being matched in the first place).
    """
    label = _func_label(func)
    softmax = _softmax_binding(func)
    probs = composed.values.get(_key(softmax.var))
    scores = composed.values.get(_key(softmax.value.args[0]))
    if not isinstance(probs, te.Tensor) or not isinstance(scores, te.Tensor):
        raise UnsupportedOperatorError(f"{label}: the softmax of the attention has no TE")
    out = composed.output
    body = body_of(out)
    if not hasattr(body, "combiner") or reduction_combiner(body, out) != "sum":
        raise UnsupportedOperatorError(f"{label}: the attention's result is not a sum over keys")

    conv = _AttentionConverter(sources, probs)
    conv.build(out, name)  # the product's axes: (*batch, i, d) and the reduction j
    keys = [a for a in conv.axes if a.reduce]
    if len(keys) != 1 or len(conv.prob_reads) != 1:
        raise UnsupportedOperatorError(f"{label}: the product does not read the probabilities once")
    j = keys[0].name
    value = _value_factor(conv.body, label)
    index = conv.prob_reads[0]
    affine = [conv.affine(i) for i in index]
    if affine[-1] != AffineIndex.of_axis(j) or any(j in a.axes for a in affine[:-1]):
        raise UnsupportedOperatorError(f"{label}: the product does not sum the softmax's row")
    # the score's reads must not merge with the value's (K and V may be one tensor)
    for entry in conv.inputs:
        entry.key = ("value", entry.key)
    score = _hoisted(conv._load(scores, index))
    expr = _attention_expr(conv, score, value, affine, name, out)
    order = _role_order(expr, j)
    expr = _renamed(_reordered(expr, order), _axis_names(expr, affine, j))
    expr, kept = _mask_as_predicate(expr, [conv.inputs[t].source.constant for t in order])
    order = [order[t] for t in kept]
    for access in expr.inputs:
        check_dtype(access.dtype, f"input '{access.name}'", mask=True)
    return ExtractedOp(
        expr=expr,
        param_of_input=tuple(conv.inputs[t].source.param for t in order),
        constants={k: conv.inputs[t].source.constant for k, t in enumerate(order)
                   if conv.inputs[t].source.constant is not None},
    )


def _mask_as_predicate(expr: TensorExpr, constants: list[Any]) -> tuple[TensorExpr, list[int]]:
    """``expr`` with a causal or banded mask of its score in the canonical form
    ``select(cond, fill, score)`` on the axis values ``i`` and ``j``
    (:func:`tvm_icca.ops.masks.canonical_mask`), and the inputs it still reads: the integer
    ranges TVM legalizes the predicate's ``arange`` to are not inputs of the operator."""
    score, value = expr.body["args"]
    masked = canonical_mask(score, expr.extent("i"), expr.extent("j"),
                            lambda t: constants[t] if 0 <= t < len(constants) else None)
    if masked is None:
        return expr, list(range(len(expr.inputs)))
    body = {"op": "attention", "args": [masked, value]}
    read = {n["input"] for n in walk_expr(body) if n.get("op") == "load"}
    kept = [t for t in range(len(expr.inputs)) if t in read]
    new_of = {old: new for new, old in enumerate(kept)}
    return TensorExpr(kind=expr.kind, axes=expr.axes, inputs=tuple(expr.inputs[t] for t in kept),
                      output=expr.output, body=renumber_loads(body, new_of),
                      local_axes=expr.local_axes, combiner=expr.combiner), kept


def _softmax_binding(func: relax.Function) -> relax.VarBinding:
    found = [b for block in func.body.blocks for b in block.bindings
             if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "") == "relax.nn.softmax"]
    if len(found) != 1:
        raise UnsupportedOperatorError(f"{_func_label(func)}: expected one softmax, found {len(found)}")
    return found[0]


def _strip_casts(node: Expr) -> Expr:
    while node.get("op") == "cast":
        node = node["args"][0]
    return node


def _value_factor(body: Expr | None, label: str) -> Expr:
    """The factor of the product ``P * value`` that is not ``P`` (nor a cast of it)."""
    if body is None or body.get("op") != "mul":
        raise UnsupportedOperatorError(f"{label}: the attention's product is not P * V")
    left, right = body["args"]
    if _strip_casts(left).get("op") == _PROBS:
        value = right
    elif _strip_casts(right).get("op") == _PROBS:
        value = left
    else:
        raise UnsupportedOperatorError(f"{label}: the product reads the probabilities inside an expression")
    if any(n.get("op") == _PROBS for n in walk_expr(value)):
        raise UnsupportedOperatorError(f"{label}: the values depend on the probabilities")
    return value


def _node_axes(node: Expr) -> set[str]:
    """The axes an expression reads (through loads, ``axis`` nodes or reductions)."""
    axes: set[str] = set()
    for n in walk_expr(node):
        if n.get("op") == "load":
            axes.update(a for i in n["index"] for a, _ in i["terms"])
        elif n.get("op") == "axis":
            axes.add(n["axis"])
    return axes


def _factors(node: Expr) -> list[tuple[str, Expr]]:
    """``node`` as a product: ``("mul", f)`` and ``("div", f)`` factors."""
    if node.get("op") == "mul":
        return _factors(node["args"][0]) + _factors(node["args"][1])
    if node.get("op") == "div":
        return _factors(node["args"][0]) + [("div", node["args"][1])]
    return [("mul", node)]


def _product(factors: list[tuple[str, Expr]]) -> Expr:
    node = factors[0][1] if factors[0][0] == "mul" else {"op": "div", "args": [
        {"op": "const", "value": 1.0}, factors[0][1]]}
    for kind, factor in factors[1:]:
        node = {"op": kind, "args": [node, factor]}
    return node


def _hoisted(score: Expr) -> Expr:
    """``score`` with the factors of each core-local sum that do not read its axes moved out
    of it: ``sum_k (q c)(k c') = (sum_k q k) c c'``."""
    score = copy.deepcopy(score)

    def visit(node: Expr) -> Expr:
        if node.get("op") == "reduce" and node.get("combiner") == "sum":
            axes = set(node["axes"])
            factors = _factors(node["args"][0])
            inner = [f for f in factors if _node_axes(f[1]) & axes]
            outer = [f for f in factors if not _node_axes(f[1]) & axes]
            if inner and outer and all(kind == "mul" for kind, _ in inner):
                reduced = dict(node, args=[_product(inner)])
                return _product([("mul", reduced)] + outer)
            return node
        if "args" in node:
            return dict(node, args=[visit(a) for a in node["args"]])
        return node

    return visit(score)


def _attention_expr(conv: TEConverter, score: Expr, value: Expr, p_index: list[AffineIndex],
                    name: str, out: te.Tensor) -> TensorExpr:
    local = {a.name for a in conv.local_axes}
    if _node_axes(value) & (local | set(p_index[-2].axes)):
        raise UnsupportedOperatorError("the attention's values read a query or head-dim axis")
    spatial = [a.name for a in conv.axes if not a.reduce]
    d_axes = set(spatial) - {a for i in p_index for a in i.axes}
    if _node_axes(score) & d_axes:
        raise UnsupportedOperatorError("the attention's scores read a value-feature axis")
    return TensorExpr(
        kind="attention",
        axes=tuple(conv.axes),
        inputs=tuple(TensorAccess(e.source.name, e.source.shape, e.source.dtype, tuple(e.indices))
                     for e in conv.inputs),
        output=TensorAccess(name, tuple(int(s) for s in out.shape), str(out.dtype),
                            tuple(conv.out_indices)),
        body={"op": "attention", "args": [score, value]},
        local_axes=tuple(conv.local_axes),
        combiner="softmax",
    )


def _role_order(expr: TensorExpr, j: str) -> list[int]:
    """Input positions in the order ``(Q, K, V, *extra)``: ``Q`` and ``K`` are the two
    reads of the core-local product (``K`` the one over the keys), ``V`` the value's read
    over the keys; the others keep their order."""
    score, value = expr.body["args"]
    q = k = v = None
    for node in walk_expr(score):
        if node.get("op") != "reduce" or node.get("combiner") != "sum":
            continue
        loads = [n for n in walk_expr(node["args"][0]) if n.get("op") == "load"]
        if len(loads) == 2:
            over_keys = [j in _node_axes(n) for n in loads]
            if over_keys.count(True) == 1:
                k = loads[over_keys.index(True)]["input"]
                q = loads[over_keys.index(False)]["input"]
                break
    for node in walk_expr(value):
        if node.get("op") == "load" and j in _node_axes(node):
            v = node["input"]
            break
    roles = [r for r in (q, k, v) if r is not None]
    if len(roles) != 3 or len(set(roles)) != 3:
        raise UnsupportedOperatorError("cannot tell the attention's queries, keys and values apart")
    return roles + [t for t in range(len(expr.inputs)) if t not in roles]


def _reordered(expr: TensorExpr, order: list[int]) -> TensorExpr:
    new_of = {old: new for new, old in enumerate(order)}
    return TensorExpr(kind=expr.kind, axes=expr.axes,
                      inputs=tuple(expr.inputs[t] for t in order), output=expr.output,
                      body=renumber_loads(expr.body, new_of), local_axes=expr.local_axes,
                      combiner=expr.combiner)


def _axis_names(expr: TensorExpr, p_index: list[AffineIndex], j: str) -> dict[str, str]:
    """Names by role: ``b0, b1, ..`` for the batch axes, ``i`` (queries), ``d`` (value
    features), ``j`` (keys), ``k`` (the head dimension of ``Q K^T``)."""
    spatial = [a.name for a in expr.axes if not a.reduce]
    rows = {a for idx in p_index[:-1] for a in idx.axes}
    names: dict[str, str] = {j: "j"}
    # the query axis: the last spatial axis the probabilities' rows read; the value axes:
    # those they do not read (normally one, ``d``)
    read = [a for a in spatial if a in rows]
    features = [a for a in spatial if a not in rows]
    if read:
        names[read[-1]] = "i"
    for n, a in enumerate(read[:-1]):
        names[a] = f"b{n}"
    for n, a in enumerate(features):
        names[a] = "d" if len(features) == 1 else f"d{n}"
    for n, a in enumerate(expr.local_axes):
        names[a.name] = "k" if len(expr.local_axes) == 1 else f"k{n}"
    return names


def _renamed(expr: TensorExpr, names: Mapping[str, str]) -> TensorExpr:
    def index(i: AffineIndex) -> AffineIndex:
        return AffineIndex(tuple((names.get(a, a), c) for a, c in i.terms), i.offset)

    def access(t: TensorAccess) -> TensorAccess:
        return TensorAccess(t.name, t.shape, t.dtype, tuple(index(i) for i in t.indices),
                            view=t.view, gather=t.gather)

    def node(n: Expr) -> Expr:
        n = dict(n)
        if n.get("op") == "load":
            n["index"] = [index(AffineIndex.from_dict(i)).to_dict() for i in n["index"]]
        elif n.get("op") == "axis":
            n["axis"] = names.get(n["axis"], n["axis"])
        elif n.get("op") == "reduce":
            n["axes"] = [names.get(a, a) for a in n["axes"]]
        if "args" in n:
            n["args"] = [node(a) for a in n["args"]]
        return n

    return TensorExpr(kind=expr.kind,
                      axes=tuple(Axis(names.get(a.name, a.name), a.extent, a.reduce) for a in expr.axes),
                      inputs=tuple(access(t) for t in expr.inputs), output=access(expr.output),
                      body=node(expr.body),
                      local_axes=tuple(Axis(names.get(a.name, a.name), a.extent, a.reduce)
                                       for a in expr.local_axes),
                      combiner=expr.combiner)
