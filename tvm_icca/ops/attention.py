"""Fused attention: ``softmax(score(Q, K)) @ V`` as one operator on the chip.

Exporters write scaled dot-product attention as separate ops: ``matmul(Q, K^T)``, the
elementwise ops around the scores (a scale ``* 1/sqrt(d)`` or ``/ sqrt(d)``, Gemma 2's
soft-cap ``c * tanh(s / c)``, an additive mask, a mask applied with ``where``, the float32
upcast of Hugging Face's ``softmax(..., dtype=float32)``), ``softmax`` over the keys, the
cast back, and ``matmul(P, V)``. The scaled-dot-product decompositions of PyTorch's ONNX
exporters (TorchScript's opset-14 symbolic and the dynamo exporter's) scale both operands by
``sqrt(scale)`` before the product. Run as three operators, the ``|i| x |j|`` score and
probability matrices round-trip between the cores; fused, each core keeps a running maximum
and sum per row and never holds more than a block of scores (the online softmax, Milakov &
Gimelshein 2018; FlashAttention, Dao et al. 2022).

:func:`attention_pattern` matches that chain (the elementwise ops between the product and the
softmax in any order, up to :data:`MAX_SCORE_OPS` of them) as one composite
``icca.attention``; :func:`attention_reason` says why a matched chain is *not* attention
(softmax not over the key axis, an op that broadcasts the scores up, a product that
broadcasts the probabilities), so the check refuses it and the ops run unfused as before.
The lowering to the tensor expression of kind ``"attention"`` is
:mod:`tvm_icca.lower.te_attention`.
"""

from __future__ import annotations

from typing import Callable, Mapping

import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import Pattern
from tvm.relax.dpl.pattern import DFPattern, is_op, wildcard
from tvm.relax.transform import PatternCheckContext

from tvm_icca.ops.mask_predicates import PREDICATE_OPS, predicate_pattern
from tvm_icca.ops.relax_types import static_shape

__all__ = ["ATTENTION_COMPOSITE", "MAX_PROBS_CASTS", "MAX_SCORE_OPS", "SCORE_OPS", "attention_pattern",
           "attention_reason", "predicate_calls"]

#: The composite name's suffix (``icca.attention``).
ATTENTION_COMPOSITE = "attention"

#: Elementwise ops allowed between ``matmul(Q, K^T)`` and the softmax (each keeps the
#: scores' shape; :func:`attention_reason` checks it).
SCORE_OPS: tuple[str, ...] = ("relax.multiply", "relax.divide", "relax.add", "relax.subtract",
                              "relax.tanh", "relax.astype", "relax.where", "relax.maximum",
                              "relax.minimum")

#: How many of them: the longest chain the exporters write is Gemma 2's, scale + soft-cap
#: (divide, tanh, multiply) + mask + upcast = 6; two more for a ``where`` mask and a cast.
MAX_SCORE_OPS = 8

#: Casts allowed between the softmax and the product: Hugging Face's eager attention writes
#: ``softmax(scores, dtype=float32).to(query.dtype)``, which the TorchScript exporter emits as
#: two ``Cast`` nodes (the softmax's ``dtype`` argument, then ``.to``), identities in a
#: float32 model.
MAX_PROBS_CASTS = 2

#: Ops allowed on the way from a ``Q`` or ``K`` operand to the product: a scale (the SDPA
#: decompositions multiply both by ``sqrt(scale)``) and the transpose of ``K``.
_OPERAND_OPS = ("relax.multiply", "relax.divide", "relax.permute_dims")

_FLOAT = ("float16", "bfloat16", "float32", "float64")


def _scaled(x: DFPattern) -> DFPattern:
    """``x * c``, ``c * x`` or ``x / c``."""
    return (is_op("relax.multiply")(x, wildcard()) | is_op("relax.multiply")(wildcard(), x)
            | is_op("relax.divide")(x, wildcard()))


def _score_op(x: DFPattern) -> DFPattern:
    """One elementwise op of :data:`SCORE_OPS` with the scores ``x`` as a data operand."""
    w = wildcard
    binary = [is_op(op)(x, w()) for op in ("relax.multiply", "relax.divide", "relax.add",
                                           "relax.subtract", "relax.maximum", "relax.minimum")]
    binary += [is_op(op)(w(), x) for op in ("relax.multiply", "relax.add")]
    unary = [is_op("relax.tanh")(x), is_op("relax.astype")(x)]
    # a band mask written as a predicate on the axis values (tvm_icca.ops.masks) first: its
    # chain joins the composite instead of becoming an [S, S] input
    select = [is_op("relax.where")(predicate_pattern(), w(), x),
              is_op("relax.where")(w(), x, w()), is_op("relax.where")(w(), w(), x)]
    alternatives = binary + unary + select
    pattern = alternatives[0]
    for alternative in alternatives[1:]:
        pattern = pattern | alternative
    return pattern


def attention_pattern(prefix: str, check: Callable[[PatternCheckContext], bool]) -> Pattern:
    """``<prefix>.attention``: ``matmul(softmax(score(Q, K)) [casts], V)``.

    ``check`` is the pattern table's operand check (every op fits the chip, no intermediate
    is used outside the match); the structure is checked by :func:`attention_reason`. The
    pattern is a chain of alternatives (``op(x) | x`` per position) rather than one pattern
    per variant: the scores' ops come in any order, and TVM's matcher tries the alternatives
    of a position only where the op names agree, so a long chain costs little.
    """
    q, k, v = wildcard(), wildcard(), wildcard()
    q_operand = _scaled(q) | q
    k_plain = _scaled(wildcard()) | wildcard()
    k_transposed = is_op("relax.permute_dims")(k_plain)
    k_operand = _scaled(k_transposed) | k_transposed | _scaled(k) | k
    scores = is_op("relax.matmul")(q_operand, k_operand)
    chain = scores
    for _ in range(MAX_SCORE_OPS):
        chain = _score_op(chain) | chain
    probs = is_op("relax.nn.softmax")(chain)
    cast = probs
    for _ in range(MAX_PROBS_CASTS):
        cast = is_op("relax.astype")(cast) | cast
    root = is_op("relax.matmul")(cast, v)
    annotations: dict[str, DFPattern] = {"scores": scores, "probs": probs, "value": v,
                                         "root": root}

    def checked(context: PatternCheckContext) -> bool:
        if not check(context):
            return False
        bound = {var: value for var, value in context.matched_bindings.items()}
        return attention_reason(context.matched_expr, bound) is None

    return (f"{prefix}.{ATTENTION_COMPOSITE}", root, annotations, checked)


# -- the structure --------------------------------------------------------------------------
def _op_name(expr: relax.Expr) -> str | None:
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


def _value(expr: relax.Expr, bound: Mapping[relax.Var, relax.Expr]) -> relax.Expr | None:
    """The call bound to ``expr`` inside the match (``None``: an input of the match)."""
    if isinstance(expr, relax.Call):
        return expr
    for var, value in bound.items():
        if var.same_as(expr):
            return value
    return None


def _shape(expr: relax.Expr) -> tuple[int, ...] | None:
    return static_shape(expr.ty)


def _is_float(expr: relax.Expr) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and str(ty.dtype) in _FLOAT


def _operand_reason(expr: relax.Expr, bound: Mapping[relax.Var, relax.Expr], what: str
                    ) -> str | None:
    """Why the ops from an input to the ``Q`` or ``K`` operand are not a scale or a
    transpose of it."""
    call = _value(expr, bound)
    while call is not None:
        name = _op_name(call)
        if name not in _OPERAND_OPS:
            return f"{what} operand is computed by {name} inside the match"
        if name == "relax.permute_dims":
            data = call.args[0]
        else:
            # a scale: the operand is the argument of the result's shape (the scale broadcasts)
            args = [a for a in call.args[:2] if _shape(a) == _shape(call)]
            if not args:
                return f"{what} operand's {name.rsplit('.', 1)[-1]} broadcasts it up"
            inner = [a for a in args if _value(a, bound) is not None]
            data = inner[0] if inner else args[0]
        call = _value(data, bound)
    return None


def _is_predicate(expr: relax.Expr, bound: Mapping[relax.Var, relax.Expr]) -> bool:
    """Whether ``expr`` is computed inside the match by the ops of a mask predicate only
    (:data:`tvm_icca.ops.mask_predicates.PREDICATE_OPS`, integer and bool values of the axes)."""
    call = _value(expr, bound)
    if call is None:
        return False
    if _op_name(call) not in PREDICATE_OPS:
        return False
    return all(_is_predicate(a, bound) for a in call.args if isinstance(a, (relax.Var, relax.Call)))


def predicate_calls(calls: list[relax.Call]) -> list[relax.Call]:
    """The calls of ``calls`` that compute a mask predicate (integer or bool results of the
    :data:`tvm_icca.ops.mask_predicates.PREDICATE_OPS`): the lowering turns them into conditions on
    the axis values, so they need not fit the chip as tensors."""
    return [c for c in calls if _op_name(c) in PREDICATE_OPS
            and not str(getattr(c.ty, "dtype", "")).startswith(("float", "bfloat"))]


def attention_reason(root: relax.Call, bound: Mapping[relax.Var, relax.Expr]) -> str | None:
    """Why the match ending in ``root`` (``matmul(P, V)``) is not fused attention, or ``None``
    if it is.

    Parameters
    ----------
    root : relax.Call
        The product of the probabilities and the values.
    bound : mapping of relax.Var to relax.Expr
        The bindings of the match (``PatternCheckContext.matched_bindings``); a variable not
        in it is an input of the composite.

    Returns
    -------
    str or None
        ``None`` when ``root`` computes ``softmax_j(score_ij) @ V`` with ``score`` an
        elementwise function of ``Q K^T`` over the keys ``j``; else the first reason it does
        not, in words.
    """
    if _op_name(root) != "relax.matmul":
        return "the root is not a matmul"
    probs = _value(root.args[0], bound)
    while _op_name(probs) == "relax.astype":
        if not _is_float(probs):
            return f"the probabilities are cast to {probs.ty.dtype}"
        probs = _value(probs.args[0], bound)
    if _op_name(probs) != "relax.nn.softmax":
        return "the left operand of the product is not a softmax"
    p_shape = _shape(probs)
    if p_shape is None or len(p_shape) < 2:
        return "the probabilities are not a static matrix"
    axis = int(probs.attrs.axis)
    if axis not in (-1, len(p_shape) - 1):
        return f"softmax over axis {axis}, not over the keys (the last axis)"
    value, out = root.args[1], _shape(root)
    v_shape = _shape(value)
    if v_shape is None or out is None or len(v_shape) < 2 or v_shape[-2] != p_shape[-1]:
        return "the values are not a static matrix with one row per key"
    if len(out) != len(p_shape) or out[:-1] != p_shape[:-1]:
        return "the product with the values broadcasts the probabilities"
    if not (_is_float(probs) and _is_float(value)):
        return "the probabilities or the values are not floating point"
    # the ops between the scores and the softmax: elementwise, keeping the scores' shape
    node = _value(probs.args[0], bound)
    score_ops = 0
    while _op_name(node) != "relax.matmul":
        name = _op_name(node)
        if name not in SCORE_OPS:
            return f"{name} between the scores and the softmax is not elementwise"
        score_ops += 1
        if _shape(node) != p_shape or not _is_float(node):
            return f"{name.rsplit('.', 1)[-1]} changes the scores' shape or dtype"
        inner = [a for a in node.args if _value(a, bound) is not None
                 and not (name == "relax.where" and a.same_as(node.args[0])
                          and _is_predicate(a, bound))]
        if len(inner) != 1:
            return f"{name.rsplit('.', 1)[-1]} reads the scores more than once"
        node = _value(inner[0], bound)
    if _shape(node) != p_shape:
        return "the product of queries and keys broadcasts up before the softmax"
    q_op, k_op = node.args
    if any(s is None or len(s) < 2 for s in (_shape(q_op), _shape(k_op))):
        return "a query or key operand is not a static matrix"
    return _operand_reason(q_op, bound, "the query") or _operand_reason(k_op, bound, "the key")


def bind_scalar_constants(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` (after ``FuseOpsByPattern``, before the regions are merged) with the scalar
    constants each ``icca.attention`` composite is called with bound inside it.

    A scale, a soft-cap or a mask's fill then lowers to a constant of the expression rather
    than a ``[]`` input the host passes (what ``bind_constants=False`` does to every
    constant): the fused attention reads ``Q``, ``K``, ``V`` and what else its score reads
    as tensors. A composite shared by several calls binds the scalars they all pass alike.
    """
    calls: dict[str, list[relax.Call]] = {}

    def visit(node: object) -> None:
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.GlobalVar):
            calls.setdefault(node.op.name_hint, []).append(node)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    bound_args: dict[str, list[int]] = {}
    functions = dict(mod.functions_items())
    renamed: dict[str, tvm.ir.GlobalVar] = {}
    new_funcs: dict[str, relax.Function] = {}
    for gvar, func in mod.functions_items():
        composite = (func.attrs or {}).get("Composite") if isinstance(func, relax.Function) else None
        if composite is None or str(composite).rsplit(".", 1)[-1] != ATTENTION_COMPOSITE:
            continue
        uses = calls.get(gvar.name_hint, [])
        if not uses:
            continue

        def scalar(a: relax.Expr):
            if isinstance(a, tvm.ir.GenericConst) and a.value.numpy().size == 1:
                return a.value.numpy()
            return None

        # bound when every caller passes the same scalar (identical layers share a composite)
        scalars = [n for n, a in enumerate(uses[0].args) if scalar(a) is not None and all(
            scalar(u.args[n]) is not None and scalar(u.args[n]).dtype == scalar(a).dtype
            and scalar(u.args[n]).tobytes() == scalar(a).tobytes() for u in uses)]
        if scalars:
            # a new global: the old one's type still has the bound parameters
            del functions[gvar]
            new_funcs[gvar.name_hint] = func.bind_params(
                {func.params[n]: uses[0].args[n] for n in scalars})
            bound_args[gvar.name_hint] = scalars
    if not bound_args:
        return mod
    builder = relax.BlockBuilder(tvm.IRModule(functions, attrs=mod.attrs))
    for name, func in new_funcs.items():
        renamed[name] = builder.add_func(func, name)
    out = builder.get()

    @relax.expr_functor.mutator
    class _DropArgs(relax.PyExprMutator):
        def visit_call_(self, call: relax.Call) -> relax.Expr:
            call = super().visit_call_(call)
            if isinstance(call.op, tvm.ir.GlobalVar) and call.op.name_hint in bound_args:
                drop = set(bound_args[call.op.name_hint])
                args = [a for n, a in enumerate(call.args) if n not in drop]
                return relax.Call(renamed[call.op.name_hint], args, call.attrs, call.ty_args)
            return call

    for gvar, func in list(out.functions_items()):
        if isinstance(func, relax.Function) and not (func.attrs or {}).get("Composite"):
            out[gvar] = _DropArgs(out).visit_expr(func)
    return out
