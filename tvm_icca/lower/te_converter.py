"""The walk over a TE DAG that builds one :class:`~runtime_sim.contract.expr.TensorExpr`.

:class:`TEConverter` converts the TE of a composite (TVM's own legalization, composed by
:func:`tvm_icca.ops.te_capture.compose_te`) into the contract's expression tree (``Expr`` dicts,
T10 §4.2): injective producers (transpose, broadcast, expand_dims, padding) are inlined into
affine index maps over the axes of :class:`~tvm_icca.lower.te_axes.AxisSpace`, elementwise
producers into the body, inner reductions into core-local ``reduce`` nodes; TIR arithmetic,
comparisons, selects, casts and intrinsics become the matching ``Expr`` nodes, a
bounds-checked read (padding) becomes the plain read the device zero-fills, and a read through
a piecewise-affine index (edge and reflect padding) a select over its affine pieces
(:mod:`tvm_icca.lower.te_pieces`). It builds one of
three forms: (a) the result is itself a sum reduction (or a windowed max/min when asked for)
whose axes are the top level; (b) a given sum reduction, read at the identity index, is the top
level and the rest its ``epilogue``; (c) an elementwise result, every reduction inside it
core-local. Which form to keep is chosen by :func:`tvm_icca.lower.te_to_expr.extract_op`
(one converter per attempt).

Refused with :class:`~runtime_sim.contract.errors.UnsupportedOperatorError`: reductions other
than sum/max/min (prod, argmax's tuple reducer), conditional max/min reductions, reductions
nested inside an expression, intrinsics with no device equivalent, and reads of a placeholder
that is not a function input.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import tvm
from tvm import te, tirx

from runtime_sim.contract.errors import UnsupportedOperatorError
from runtime_sim.contract.expr import AffineIndex, Expr, TensorAccess, TensorExpr, expr_loads
from runtime_sim.contract.hardware import check_dtype
from schedules import kind_of
from tvm_icca.lower.te_axes import AxisSpace
from tvm_icca.lower.te_nodes import (
    body_of,
    conjunction_terms,
    is_index_arith,
    is_int,
    is_number,
    is_tensor_load,
    reduction_combiner,
    same_tensor,
    tensor_shape,
)
from tvm_icca.lower.te_pieces import Piece, affine_pieces
from tvm_icca.ops.te_capture import ffi_key as _key

_UNARY_INTRINSICS = {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh",
    "sin": "sin", "cos": "cos",
    "sigmoid": "sigmoid", "erf": "erf", "fabs": "abs", "floor": "floor", "ceil": "ceil",
    "round": "round", "nearbyint": "round",
}
_BINARY_NODES: tuple[tuple[type, str], ...] = (
    (tirx.Add, "add"), (tirx.Sub, "sub"), (tirx.Mul, "mul"), (tirx.Div, "div"),
    (tirx.Max, "max"), (tirx.Min, "min"),
    (tirx.LT, "lt"), (tirx.LE, "le"), (tirx.GT, "gt"), (tirx.GE, "ge"),
    (tirx.EQ, "eq"), (tirx.NE, "ne"), (tirx.And, "and"), (tirx.Or, "or"),
)


@dataclass(frozen=True)
class InputSource:
    """Where a TE placeholder's data comes from."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    param: int | None
    constant: np.ndarray | None = None


@dataclass
class _InputEntry:
    source: InputSource
    key: int  # placeholder op handle
    indices: list[AffineIndex]  # the partitioning access (see TensorAccess)
    local_dims: list[bool]  # dims of ``indices`` that use a core-local axis
    readers: set[str] = field(default_factory=set)  # "body" / "epilogue"


class TEConverter(AxisSpace):
    """Builds one TensorExpr from a TE DAG (one instance per attempt)."""

    def __init__(self, sources: Mapping[int, InputSource], epilogue_of: te.Tensor | None = None,
                 top_level_minmax: bool = False,
                 out_atoms: Sequence[Sequence[int]] | None = None) -> None:
        super().__init__()
        self.sources = sources
        self.epilogue_of = epilogue_of  # the sum reduction promoted to the top level
        # a max/min result reduces over top-level axes (see extract_op) instead of core-local ones
        self.top_level_minmax = top_level_minmax
        self.out_atoms = out_atoms  # per output dim, the extents of the axes it merges
        self.combiner = "sum"  # of the top-level reduction axes
        self.inputs: list[_InputEntry] = []
        self.memo: dict[tuple, Expr] = {}
        self.region = "body"
        self.reduce_depth = 0
        # Every read of a reduction: (tensor, index, nesting depth) -- see epilogue_anchor.
        self.reduction_reads: list[tuple[te.Tensor, list[tirx.PrimExpr], int]] = []
        self.body: Expr | None = None
        self.epilogue: Expr | None = None

    # -- top level ------------------------------------------------------------------------
    def build(self, out: te.Tensor, name: str) -> None:
        """Convert the TE DAG ending in ``out`` in this converter's form (see the module)."""
        shape = tensor_shape(out)
        if self.epilogue_of is not None:
            self._build_with_epilogue(out, shape)
            return
        op = out.op
        body = body_of(out)
        top = ("sum", "max", "min") if self.top_level_minmax else ("sum",)
        if isinstance(body, tirx.Reduce) and reduction_combiner(body, out) in top:
            # Mode (a): the result is itself a sum reduction (matmul, conv2d, sum), or a
            # windowed max/min when asked for (max pooling, see extract_op).
            self.combiner = reduction_combiner(body, out)
            self.spatial_axes(list(op.axis), shape, body)
            env = {_key(iv.var): v for iv, v in zip(op.axis, self.spatial)}
            for iv in body.axis:
                extent = self.axis_extent(iv, env)
                env[_key(iv.var)] = self.new_axis(iv.var.name, extent, True, False)
            self.body = self._reduce_source(body, env, self.combiner)
            return
        # Mode (c): elementwise result; any reduction inside stays core-local.
        names = [iv.var.name for iv in op.axis] if isinstance(op, te.ComputeOp) else []
        names += [f"i{d}" for d in range(len(names), len(shape))]
        if self.out_atoms is not None and not isinstance(body, tirx.Reduce):
            # over finer axes: each output dim merges its atoms row-major
            self.body = self._load(out, self.merged_output(names, shape, self.out_atoms))
            return
        self.spatial = [self.new_axis(n, e, False, False) for n, e in zip(names, shape)]
        self.out_indices = [AffineIndex.of_axis(v.name) for v in self.spatial]
        self.body = self._load(out, list(self.spatial))

    def _build_with_epilogue(self, out: te.Tensor, shape: tuple[int, ...]) -> None:
        # Mode (b): the promoted reduction's axes are the top-level axes; it is read at the
        # identity index, so its spatial axes are the output's.
        red = self.epilogue_of
        body = body_of(red)
        self.spatial_axes(list(red.op.axis), shape, body)
        env = {_key(iv.var): v for iv, v in zip(red.op.axis, self.spatial)}
        for iv in body.axis:
            env[_key(iv.var)] = self.new_axis(iv.var.name, self.axis_extent(iv, env), True, False)
        self.body = self._reduce_source(body, env)
        self.region = "epilogue"
        out_env = {_key(iv.var): v for iv, v in zip(out.op.axis, self.spatial)}
        self.epilogue = self._value(body_of(out), out_env)

    def epilogue_anchor(self, out: te.Tensor) -> te.Tensor | None:
        """The sum reduction to promote to the top level, from a mode-(c) conversion."""
        if not isinstance(out.op, te.ComputeOp) or isinstance(body_of(out), tirx.Reduce):
            return None
        outer = [(t, i) for t, i, depth in self.reduction_reads if depth == 0]
        if not outer:
            return None
        red = outer[0][0]
        if any(not same_tensor(t, red) or not self._is_identity(i) for t, i in outer):
            return None
        if any(same_tensor(t, red) for t, _, depth in self.reduction_reads if depth > 0):
            return None  # also needed inside another reduction: it must stay core-local
        if reduction_combiner(body_of(red), red) != "sum":
            return None
        return red

    def _is_identity(self, index: Sequence[tirx.PrimExpr]) -> bool:
        """Is ``index`` exactly the output's spatial axes, in order?"""
        return len(index) == len(self.out_indices) and all(
            self.affine(i) == o for i, o in zip(index, self.out_indices)
        )

    def finish(self, op_names: Sequence[str], out: te.Tensor, name: str) -> TensorExpr:
        """The built conversion as a TensorExpr, its output named ``name`` and its template kind
        chosen from the Relax ``op_names`` (:func:`schedules.kind_of`)."""
        if self.body is None:
            raise UnsupportedOperatorError("nothing was converted")
        for entry in self.inputs:
            check_dtype(entry.source.dtype, f"input '{entry.source.name}'", mask=True)
        epilogue_inputs = tuple(
            i for i, e in enumerate(self.inputs) if e.readers == {"epilogue"}
        )
        expr = TensorExpr(
            kind="elementwise",
            axes=tuple(self.axes),
            inputs=tuple(
                TensorAccess(e.source.name, e.source.shape, e.source.dtype, tuple(e.indices))
                for e in self.inputs
            ),
            output=TensorAccess(
                name, tensor_shape(out), str(out.dtype),
                tuple(self.out_indices),
            ),
            body=self.body,
            local_axes=tuple(self.local_axes),
            epilogue=self.epilogue,
            epilogue_inputs=epilogue_inputs,
            combiner=self.combiner,
        )
        return dataclasses.replace(expr, kind=kind_of(op_names, expr))

    # -- integer values -------------------------------------------------------------------
    def _int_tree(self, e: tirx.PrimExpr) -> Expr:
        """An integer value (e.g. an axis used in a comparison) as an expression tree.

        Affine values become sums of axes times constants; min/max of such values (average
        pooling without ``count_include_pad`` divides by the in-bounds window size
        ``(min(h*s + k - p, H) - max(h*s - p, 0)) * ...``) become min/max nodes over them.
        """
        try:
            idx = self.affine(e, "integer expression")
        except UnsupportedOperatorError:
            nodes = {tirx.Min: "min", tirx.Max: "max", tirx.Add: "add", tirx.Sub: "sub", tirx.Mul: "mul"}
            name = nodes.get(type(e))
            if name is None:
                raise
            return {"op": name, "args": [self._int_tree(e.a), self._int_tree(e.b)]}
        tree: Expr | None = None
        for a, c in idx.terms:
            term: Expr = {"op": "axis", "axis": a}
            if c != 1:
                term = {"op": "mul", "args": [term, _const(c)]}
            tree = term if tree is None else {"op": "add", "args": [tree, term]}
        if tree is None:
            return _const(idx.offset)
        return tree if idx.offset == 0 else {"op": "add", "args": [tree, _const(idx.offset)]}

    # -- loads ----------------------------------------------------------------------------
    def _load(self, tensor: te.Tensor, index: list[tirx.PrimExpr]) -> Expr:
        """``tensor[index]`` where ``index`` is already over our axes."""
        op = tensor.op
        if isinstance(op, te.PlaceholderOp):
            return self._load_input(tensor, index)
        if not isinstance(op, te.ComputeOp):
            raise UnsupportedOperatorError(
                f"TE stage '{op.name}' is a {type(op).__name__}, not a compute expression"
            )
        body = body_of(tensor)
        inner = {_key(iv.var): i for iv, i in zip(op.axis, index)}
        if isinstance(body, tirx.Reduce):
            return self._reduction(tensor, body, index, inner)
        return self._value(body, inner)

    def _load_input(self, tensor: te.Tensor, index: list[tirx.PrimExpr]) -> Expr:
        src = self.sources.get(_key(tensor.op))
        if src is None:
            raise UnsupportedOperatorError(f"TE placeholder '{tensor.op.name}' is not a function input")
        if src.constant is not None and src.constant.size == 1:
            return _const(src.constant.reshape(()).item())
        try:
            affine = [self.affine(i) for i in index]
        except UnsupportedOperatorError:
            pieces = affine_pieces(self, index)
            if pieces is None:
                raise
            return self._piecewise_load(tensor, pieces)
        local = {a.name for a in self.local_axes}
        is_local = [bool(set(i.axes) & local) for i in affine]
        pos = None
        for p, entry in enumerate(self.inputs):
            if entry.key != _key(tensor.op):
                continue
            if all(
                a == b or la or lb
                for a, b, la, lb in zip(entry.indices, affine, entry.local_dims, is_local)
            ):
                pos = p
                for d, (la, lb) in enumerate(zip(entry.local_dims, is_local)):
                    if la and not lb:  # prefer a partitionable access for the partitioning
                        entry.indices[d] = affine[d]
                        entry.local_dims[d] = False
                break
        if pos is None:
            self.inputs.append(_InputEntry(src, _key(tensor.op), list(affine), list(is_local)))
            pos = len(self.inputs) - 1
        self.inputs[pos].readers.add(self.region)
        return {"op": "load", "input": pos, "index": [i.to_dict() for i in affine]}

    def _piecewise_load(self, tensor: te.Tensor, pieces: list[Piece]) -> Expr:
        """A read through a piecewise-affine index (edge and reflect padding,
        :mod:`tvm_icca.lower.te_pieces`): a select over the affine reads of its pieces, the
        last one taken where no other piece's guards hold."""
        node = self._load_input(tensor, list(pieces[-1].index))
        for piece in reversed(pieces[:-1]):
            if not piece.guards:  # holds everywhere: the pieces after it are never read
                node = self._load_input(tensor, list(piece.index))
                continue
            guards = [{"op": "ge", "args": [self._int_tree(g), _const(0)]} for g in piece.guards]
            cond = guards[0]
            for g in guards[1:]:
                cond = {"op": "and", "args": [cond, g]}
            node = {"op": "select", "args": [cond, self._load_input(tensor, list(piece.index)), node]}
        return node

    def _reduction(
        self, tensor: te.Tensor, body: tirx.Reduce, index: list[tirx.PrimExpr], env: dict
    ) -> Expr:
        if self.epilogue_of is not None and same_tensor(tensor, self.epilogue_of):
            if self.reduce_depth == 0 and self._is_identity(index):
                return {"op": "result"}
            raise UnsupportedOperatorError("the promoted reduction is read at a non-identity index")
        self.reduction_reads.append((tensor, list(index), self.reduce_depth))
        key = (_key(tensor.op), int(tensor.value_index), tuple(self.affine(i) for i in index))
        if key in self.memo:
            # The same reduction at the same point (softmax's max in numerator and in the
            # sum): share the node rather than inventing a second set of local axes.
            node = copy.deepcopy(self.memo[key])
            for load in expr_loads(node):
                self.inputs[load["input"]].readers.add(self.region)
            return node
        combiner = reduction_combiner(body, tensor)
        if combiner not in ("sum", "max", "min"):
            raise UnsupportedOperatorError(
                f"reduction '{tensor.op.name}' has combiner {combiner}; only sum/max/min are supported"
            )
        env = dict(env)
        names = []
        for iv in body.axis:
            var = self.new_axis(iv.var.name, self.axis_extent(iv, env), True, True)
            env[_key(iv.var)] = var
            names.append(var.name)
        self.reduce_depth += 1
        try:
            source = self._reduce_source(body, env, combiner)
        finally:
            self.reduce_depth -= 1
        node = {"op": "reduce", "combiner": combiner, "axes": names, "args": [source]}
        self.memo[key] = node
        return copy.deepcopy(node)

    def _reduce_source(self, body: tirx.Reduce, env: Mapping[int, Any], combiner: str = "sum") -> Expr:
        vi = int(body.value_index)
        if len(body.init):
            init, ident = body.init[vi], body.combiner.identity_element[vi]
            # topi.einsum spells out init = identity; any other init shifts the result.
            if not (is_number(init) and is_number(ident) and float(init.value) == float(ident.value)):
                raise UnsupportedOperatorError(f"a reduction initialized with {init} is not supported")
        source = self._value(body.source[vi], env)
        cond = body.condition
        if isinstance(cond, tirx.IntImm) and int(cond.value):
            return source
        if combiner != "sum":
            raise UnsupportedOperatorError(f"a conditional {combiner} reduction is not supported")
        # A conditional sum is the sum of the source where the condition holds.
        return {"op": "select", "args": [self._value(cond, env), source, _const(0.0)]}

    # -- values ---------------------------------------------------------------------------
    def _value(self, e: Any, env: Mapping[int, Any]) -> Expr:
        if is_tensor_load(e):
            index = [self.subst(i, env) for i in e.args[1:]]
            return self._load(e.args[0], index)
        if isinstance(e, tvm.ir.Var):
            bound = env.get(_key(e))
            if isinstance(bound, dict):  # a Let-bound value
                return copy.deepcopy(bound)
            return self._int_tree(self.subst(e, env))
        if isinstance(e, tirx.FloatImm):
            return _const(float(e.value))
        if isinstance(e, tirx.IntImm):
            return _const(int(e.value))
        if is_index_arith(e):
            return self._int_tree(self.subst(e, env))
        if isinstance(e, tirx.Cast):
            return {"op": "cast", "dtype": str(e.ty.dtype), "args": [self._value(e.value, env)]}
        if isinstance(e, tirx.Div) and is_int(e):
            # integer Div truncates toward zero (TIR's truncdiv; average pooling's window count
            # with dilation uses it): round the quotient toward zero
            q = {"op": "div", "args": [self._value(e.a, env), self._value(e.b, env)]}
            return {"op": "select", "args": [{"op": "ge", "args": [q, _const(0)]},
                                             {"op": "floor", "args": [q]}, {"op": "ceil", "args": [q]}]}
        for cls, name in _BINARY_NODES:
            if type(e) is cls:
                return {"op": name, "args": [self._value(e.a, env), self._value(e.b, env)]}
        if isinstance(e, tirx.FloorDiv):
            return {"op": "floor", "args": [
                {"op": "div", "args": [self._value(e.a, env), self._value(e.b, env)]}]}
        if isinstance(e, tirx.Not):
            return {"op": "not", "args": [self._value(e.a, env)]}
        if isinstance(e, tirx.Select):
            return self._select(e.condition, e.true_value, e.false_value, env)
        if isinstance(e, tirx.Let):
            inner = dict(env)
            inner[_key(e.var)] = (
                self.subst(e.value, env) if is_index_arith(e.value) else self._value(e.value, env)
            )
            return self._value(e.body, inner)
        if isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op):
            short = e.op.name.rsplit(".", 1)[-1]
            if short == "if_then_else":
                return self._select(e.args[0], e.args[1], e.args[2], env)
            if short == "likely":
                return self._value(e.args[0], env)
            if short in _UNARY_INTRINSICS:
                return {"op": _UNARY_INTRINSICS[short], "args": [self._value(e.args[0], env)]}
            if short == "pow":
                return {"op": "pow", "args": [self._value(a, env) for a in e.args]}
            raise UnsupportedOperatorError(f"intrinsic '{e.op.name}' has no device equivalent")
        if isinstance(e, tirx.Reduce):
            raise UnsupportedOperatorError("a reduction nested inside an expression is not supported")
        raise UnsupportedOperatorError(f"TE expression node {type(e).__name__} is not supported")

    def _select(self, cond: Any, then: Any, other: Any, env: Mapping[int, Any]) -> Expr:
        conjuncts = conjunction_terms(cond)
        if all(isinstance(c, tirx.IntImm) and int(c.value) for c in conjuncts):
            return self._value(then, env)
        then_e = self._value(then, env)
        other_e = self._value(other, env)
        if self._is_bounds_check(conjuncts, then_e, other_e, env):
            # Padding (topi's pad_temp): the device zero-fills out-of-range reads, so the
            # guarded read alone means the same thing.
            return then_e
        return {"op": "select", "args": [self._value(cond, env), then_e, other_e]}

    def _is_bounds_check(self, conjuncts: list, then_e: Expr, other_e: Expr, env: Mapping) -> bool:
        """Is ``cond ? then : 0`` exactly ``then`` read with zero fill out of bounds?

        Not when a checked dimension is read by a plain axis (a pad after the end only,
        ``i < n ? x[i] : 0``): a plain axis longer than its dimension is what the program
        validation refuses as a wrong extent, so that read keeps its guard (a guarded read,
        as concat's, :func:`runtime_sim.contract.expr.guarded_inputs`)."""
        if then_e.get("op") != "load" or other_e.get("op") != "const" or other_e["value"] != 0:
            return False
        entry = self.inputs[then_e["input"]]
        index = [AffineIndex.from_dict(i) for i in then_e["index"]]
        bounds = {}  # bound's key -> the dimension it checks
        for d, idx in enumerate(index):  # lower: idx >= 0, upper: shape-1-idx >= 0
            bounds[_affine_key(idx.terms, idx.offset)] = d
            neg = tuple((a, -c) for a, c in idx.terms)
            bounds[_affine_key(neg, entry.source.shape[d] - 1 - idx.offset)] = d
        for c in conjuncts:
            g = self.nonneg_form(c, env)
            if g is None:
                return False
            if g == "true":
                continue
            d = bounds.get(_affine_key(g.terms, g.offset))
            if d is None or index[d].is_simple:
                return False
        return True


def _const(v: float | int) -> Expr:
    return {"op": "const", "value": v}


def _affine_key(terms: Sequence[tuple[str, int]], offset: int) -> tuple:
    return (tuple(sorted((a, c) for a, c in terms if c)), int(offset))

