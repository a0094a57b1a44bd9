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

Axis names are TVM's own iteration variable names (``i0, i1, k`` for matmul, ``nn, ff, yy,
xx, rc, ry, rx`` for conv2d, ``ax0, k1`` for topi reductions), suffixed ``_1, _2`` where
they would clash.

One job at ~840 lines: the conversion is one recursive walk over the TE DAG
(:class:`_Converter`), whose cases share the walk's state (inlined producers, axis names, guards,
the anchor's reduction); the TIR predicates it reads with are at the end of the module.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, te, tirx
from tvm.sym import Analyzer

from runtime_sim.contract.errors import UnsupportedOperatorError
from runtime_sim.contract.expr import AffineIndex, Axis, Expr, TensorAccess, TensorExpr, expr_loads
from runtime_sim.contract.hardware import check_dtype
from runtime_sim.contract.plan_rules import pinned_axes
from schedules import kind_of
from tvm_icca.ops.extracted_op import ExtractedOp
from tvm_icca.ops.gather import gather_op
from tvm_icca.ops.te_capture import ComposedTE, compose_te
from tvm_icca.ops.te_capture import ffi_key as _key
from tvm_icca.ops.te_capture import function_label as _func_label
from tvm_icca.ops.views import output_atoms

__all__ = ["ExtractedOp", "extract_op", "tensor_expr_of"]


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
    out = composed.output
    check_dtype(str(out.dtype), f"output of {_func_label(func)}")
    if len(out.shape) and any(not isinstance(s, tirx.IntImm) for s in out.shape):
        raise UnsupportedOperatorError(f"{_func_label(func)} has a dynamic output shape")

    # a reshape iterates over its atoms (tvm_icca.ops.views): its div/mod indices become affine
    probe = _Converter(sources, out_atoms=output_atoms(func))
    try:
        probe.build(out, name)
    except UnsupportedOperatorError as err:
        # The core-local form can fail where the promoted one works (a grouped convolution's
        # ``ff // (F/G)`` is affine only once its output axis is split into groups, which
        # only the top level does): try the one sum reduction the elementwise result reads.
        anchor = _only_sum_reduction(out)
        if anchor is None:
            raise
        conv = _Converter(sources, epilogue_of=anchor)
        try:
            conv.build(out, name)
        except UnsupportedOperatorError:
            raise err from None
    else:
        conv = probe
        anchor = probe.epilogue_anchor(out)
        if anchor is not None:
            promoted = _Converter(sources, epilogue_of=anchor)
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
        windowed = _Converter(sources, top_level_minmax=True)
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
# TE DAG -> TensorExpr
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """Where a TE placeholder's data comes from."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    param: int | None
    constant: np.ndarray | None = None


@dataclass
class _InputEntry:
    source: _Source
    key: int  # placeholder op handle
    indices: list[AffineIndex]  # the partitioning access (see TensorAccess)
    local_dims: list[bool]  # dims of ``indices`` that use a core-local axis
    readers: set[str] = field(default_factory=set)  # "body" / "epilogue"


def _sources(func: relax.Function, composed: ComposedTE) -> dict[int, _Source]:
    out = {}
    for i, (param, ph) in enumerate(zip(func.params, composed.placeholders)):
        out[_key(ph.op)] = _Source(param.name, _shape(ph), str(ph.dtype), i)
    for ph, value in composed.constants:
        out[_key(ph.op)] = _Source("const", _shape(ph), str(ph.dtype), None, value)
    return out


class _Converter:
    """Builds one TensorExpr from a TE DAG (one instance per attempt)."""

    def __init__(self, sources: Mapping[int, _Source], epilogue_of: te.Tensor | None = None,
                 top_level_minmax: bool = False, out_atoms: Sequence[Sequence[int]] | None = None):
        self.sources = sources
        self.epilogue_of = epilogue_of  # the sum reduction promoted to the top level
        # a max/min result reduces over top-level axes (see extract_op) instead of core-local ones
        self.top_level_minmax = top_level_minmax
        self.out_atoms = out_atoms  # per output dim, the extents of the axes it merges
        self.combiner = "sum"  # of the top-level reduction axes
        self.analyzer = Analyzer()
        self.axes: list[Axis] = []
        self.local_axes: list[Axis] = []
        self.axis_vars: dict[str, tirx.Var] = {}
        self.order: dict[str, int] = {}
        # The output's iteration variables over our axes: an axis, or ``g*k + f`` for a
        # grouped axis split by _spatial_axes; ``out_indices`` is the output access they give.
        self.spatial: list[tirx.PrimExpr] = []
        self.out_indices: list[AffineIndex] = []
        self.inputs: list[_InputEntry] = []
        self.memo: dict[tuple, Expr] = {}
        self.region = "body"
        self.reduce_depth = 0
        # Every read of a reduction: (tensor, index, nesting depth) -- see epilogue_anchor.
        self.reduction_reads: list[tuple[te.Tensor, list[tirx.PrimExpr], int]] = []
        self.body: Expr | None = None
        self.epilogue: Expr | None = None

    # -- axes -----------------------------------------------------------------------------
    def _new_axis(self, hint: str, extent: int, reduce: bool, local: bool) -> tirx.Var:
        name, n = hint or "ax", 0
        while name in self.axis_vars:
            n += 1
            name = f"{hint}_{n}"
        var = tirx.Var(name, "int64")
        self.axis_vars[name] = var
        self.order[name] = len(self.order)
        self.analyzer.bind(
            var, tvm.ir.Range.from_min_extent(tirx.const(0, "int64"), tirx.const(extent, "int64"))
        )
        (self.local_axes if local else self.axes).append(Axis(name, int(extent), reduce))
        return var

    def _spatial_axes(self, ivs: Sequence[Any], shape: Sequence[int], body: Any) -> None:
        """The top-level spatial axes of a reduction over ``ivs`` (its output iteration vars).

        An output variable ``v`` that the body divides by a constant ``k`` (grouped
        convolution reads its input channel at ``ff // (F/G) * (C/G) + rc``) is split into a group axis ``g`` (extent ``E/k``) and an in-group axis ``f`` (extent
        ``k``) with ``v = g*k + f``: TVM's simplifier then rewrites ``v // k`` to ``g``, so every
        index is affine (T10 §5 needs sums of axes times constants) and the output dimension
        is indexed by the digit index ``g*k + f`` (its layout rule:
        :func:`runtime_sim.contract.plan_rules.pinned_axes`).
        """
        divisors = _floordiv_divisors(body)
        self.spatial, self.out_indices = [], []
        for d, extent in enumerate(shape):
            name = ivs[d].var.name if d < len(ivs) else f"i{d}"
            k = divisors.get(_key(ivs[d].var), set()) if d < len(ivs) else set()
            k = {x for x in k if 1 < x < extent and extent % x == 0}
            if len(k) == 1:
                (k,) = k
                g = self._new_axis("g", extent // k, False, False)
                f = self._new_axis("f", k, False, False)
                self.spatial.append(g * tirx.const(k, "int64") + f)
                self.out_indices.append(AffineIndex(((g.name, k), (f.name, 1)), 0))
            else:
                v = self._new_axis(name, extent, False, False)
                self.spatial.append(v)
                self.out_indices.append(AffineIndex.of_axis(v.name))

    def _merged_output(self, names: Sequence[str], shape: Sequence[int]) -> list[tirx.PrimExpr]:
        """One axis per atom of each output dim (outermost first); the output dim is written
        at their row-major merge (:func:`runtime_sim.contract.expr.merged_axes`). Returns the
        output's index over those axes, for the load of the TE result."""
        index = []
        for d, (hint, atoms) in enumerate(zip(names, self.out_atoms)):
            if len(atoms) == 1:
                var = self._new_axis(hint, int(shape[d]), False, False)
                self.spatial.append(var)
                self.out_indices.append(AffineIndex.of_axis(var.name))
                index.append(var)
                continue
            terms, expr = [], None
            for j, extent in enumerate(atoms):
                var = self._new_axis(f"{hint}_{j}", int(extent), False, False)
                stride = int(np.prod(atoms[j + 1:], dtype=np.int64))
                terms.append((var.name, stride))
                self.spatial.append(var)
                term = var if stride == 1 else var * tirx.const(stride, "int64")
                expr = term if expr is None else expr + term
            self.out_indices.append(AffineIndex(tuple(terms), 0))
            index.append(expr)
        return index

    def _extent(self, iv: Any, env: Mapping[int, Any]) -> int:
        """The extent of reduction axis ``iv``; one written over the output's axes (adaptive
        pooling's window ``end(h) - start(h)``) counts when it is the same for every output
        point (TVM's simplifier, which knows each axis's range, proves it constant)."""
        dom = iv.dom
        if isinstance(dom.extent, tirx.IntImm) or not _is_index_arith(dom.extent):
            return _extent(iv)
        try:
            extent = self.analyzer.simplify(self._subst(dom.extent, env))
        except UnsupportedOperatorError:
            return _extent(iv)
        if isinstance(dom.min, tirx.IntImm) and int(dom.min.value) == 0 and isinstance(extent, tirx.IntImm):
            return int(extent.value)
        return _extent(iv)

    # -- top level ------------------------------------------------------------------------
    def build(self, out: te.Tensor, name: str) -> None:
        shape = _shape(out)
        if self.epilogue_of is not None:
            self._build_with_epilogue(out, shape)
            return
        op = out.op
        body = _body_of(out)
        top = ("sum", "max", "min") if self.top_level_minmax else ("sum",)
        if isinstance(body, tirx.Reduce) and _combiner(body, out) in top:
            # Mode (a): the result is itself a sum reduction (matmul, conv2d, sum), or a
            # windowed max/min when asked for (max pooling, see extract_op).
            self.combiner = _combiner(body, out)
            self._spatial_axes(list(op.axis), shape, body)
            env = {_key(iv.var): v for iv, v in zip(op.axis, self.spatial)}
            for iv in body.axis:
                env[_key(iv.var)] = self._new_axis(iv.var.name, self._extent(iv, env), True, False)
            self.body = self._reduce_source(body, env, self.combiner)
            return
        # Mode (c): elementwise result; any reduction inside stays core-local.
        names = [iv.var.name for iv in op.axis] if isinstance(op, te.ComputeOp) else []
        names += [f"i{d}" for d in range(len(names), len(shape))]
        if self.out_atoms is not None and not isinstance(body, tirx.Reduce):
            # over finer axes: each output dim merges its atoms row-major
            self.body = self._load(out, self._merged_output(names, shape))
            return
        self.spatial = [self._new_axis(n, e, False, False) for n, e in zip(names, shape)]
        self.out_indices = [AffineIndex.of_axis(v.name) for v in self.spatial]
        self.body = self._load(out, list(self.spatial))

    def _build_with_epilogue(self, out: te.Tensor, shape: tuple[int, ...]) -> None:
        # Mode (b): the promoted reduction's axes are the top-level axes; it is read at the
        # identity index, so its spatial axes are the output's.
        red = self.epilogue_of
        body = _body_of(red)
        self._spatial_axes(list(red.op.axis), shape, body)
        env = {_key(iv.var): v for iv, v in zip(red.op.axis, self.spatial)}
        for iv in body.axis:
            env[_key(iv.var)] = self._new_axis(iv.var.name, self._extent(iv, env), True, False)
        self.body = self._reduce_source(body, env)
        self.region = "epilogue"
        out_env = {_key(iv.var): v for iv, v in zip(out.op.axis, self.spatial)}
        self.epilogue = self._value(_body_of(out), out_env)

    def epilogue_anchor(self, out: te.Tensor) -> te.Tensor | None:
        """The sum reduction to promote to the top level, from a mode-(c) conversion."""
        if not isinstance(out.op, te.ComputeOp) or isinstance(_body_of(out), tirx.Reduce):
            return None
        outer = [(t, i) for t, i, depth in self.reduction_reads if depth == 0]
        if not outer:
            return None
        red = outer[0][0]
        if any(not _same_tensor(t, red) or not self._is_identity(i) for t, i in outer):
            return None
        if any(_same_tensor(t, red) for t, _, depth in self.reduction_reads if depth > 0):
            return None  # also needed inside another reduction: it must stay core-local
        if _combiner(_body_of(red), red) != "sum":
            return None
        return red

    def _is_identity(self, index: Sequence[tirx.PrimExpr]) -> bool:
        """Is ``index`` exactly the output's spatial axes, in order?"""
        return len(index) == len(self.out_indices) and all(
            self._affine(i) == o for i, o in zip(index, self.out_indices)
        )

    def finish(self, op_names: Sequence[str], out: te.Tensor, name: str) -> TensorExpr:
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
                name, _shape(out), str(out.dtype),
                tuple(self.out_indices),
            ),
            body=self.body,
            local_axes=tuple(self.local_axes),
            epilogue=self.epilogue,
            epilogue_inputs=epilogue_inputs,
            combiner=self.combiner,
        )
        return dataclasses.replace(expr, kind=kind_of(op_names, expr))

    # -- index arithmetic -----------------------------------------------------------------
    def _subst(self, e: Any, env: Mapping[int, Any]) -> tirx.PrimExpr:
        """An integer TE expression rewritten over our axis variables (not simplified)."""
        if isinstance(e, tvm.ir.Var):
            value = env.get(_key(e))
            if value is None or isinstance(value, dict):
                raise UnsupportedOperatorError(f"index variable '{e.name}' is not an iteration axis")
            return value
        if isinstance(e, tirx.IntImm):
            return tirx.const(int(e.value), "int64")
        if isinstance(e, tirx.Cast) and _is_int(e):
            return self._subst(e.value, env)
        ops = {
            tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b,
            tirx.Mul: lambda a, b: a * b, tirx.FloorDiv: tirx.floordiv,
            tirx.FloorMod: tirx.floormod, tirx.Min: tirx.min, tirx.Max: tirx.max,
        }
        build = ops.get(type(e))
        if build is not None:
            return build(self._subst(e.a, env), self._subst(e.b, env))
        if isinstance(e, tirx.Select) and isinstance(e.condition, tirx.IntImm):
            # topi's adaptive pooling writes its window end as Select(True, ...)
            return self._subst(e.true_value if int(e.condition.value) else e.false_value, env)
        if _is_tensor_load(e):
            raise UnsupportedOperatorError(
                f"data-dependent index (reads tensor '{e.args[0].op.name}'): not affine"
            )
        raise UnsupportedOperatorError(f"index expression {type(e).__name__} is not supported")

    def _affine(self, e: tirx.PrimExpr, what: str = "tensor index") -> AffineIndex:
        """``e`` as a sum of axes times constants (T10 §5 compound axis).

        The expression as TE wrote it is tried first, so that a batch axis of extent 1 stays
        visible in the access map; only if that is not affine do we let TVM's arithmetic
        simplifier (which knows every axis range) try, which turns e.g. the div/mod of a
        reshape that only inserts unit dimensions back into plain axes.
        """
        try:
            return self._affine_raw(e, what)
        except UnsupportedOperatorError:
            return self._affine_raw(self.analyzer.simplify(e), what)

    def _affine_raw(self, e: tirx.PrimExpr, what: str) -> AffineIndex:
        coefs: dict[str, int] = {}
        offset = 0

        def walk(x: Any, scale: int) -> None:
            nonlocal offset
            if isinstance(x, tvm.ir.Var):
                coefs[x.name] = coefs.get(x.name, 0) + scale
            elif isinstance(x, tirx.IntImm):
                offset += scale * int(x.value)
            elif isinstance(x, tirx.Add):
                walk(x.a, scale)
                walk(x.b, scale)
            elif isinstance(x, tirx.Sub):
                walk(x.a, scale)
                walk(x.b, -scale)
            elif isinstance(x, tirx.Mul) and isinstance(x.b, tirx.IntImm):
                walk(x.a, scale * int(x.b.value))
            elif isinstance(x, tirx.Mul) and isinstance(x.a, tirx.IntImm):
                walk(x.b, scale * int(x.a.value))
            elif isinstance(x, tirx.Cast) and _is_int(x):
                walk(x.value, scale)
            else:
                raise UnsupportedOperatorError(
                    f"{what} '{e}' is not affine in the iteration axes (T10 §5 compound axes "
                    "must be sums of axes times constants; e.g. reshape's div/mod is not)"
                )

        walk(e, 1)
        terms = tuple(sorted(((a, c) for a, c in coefs.items() if c), key=lambda t: self.order[t[0]]))
        return AffineIndex(terms, offset)

    def _int_tree(self, e: tirx.PrimExpr) -> Expr:
        """An integer value (e.g. an axis used in a comparison) as an expression tree.

        Affine values become sums of axes times constants; min/max of such values (average
        pooling without ``count_include_pad`` divides by the in-bounds window size
        ``(min(h*s + k - p, H) - max(h*s - p, 0)) * ...``) become min/max nodes over them.
        """
        try:
            idx = self._affine(e, "integer expression")
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
        body = _body_of(tensor)
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
        affine = [self._affine(i) for i in index]
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

    def _reduction(
        self, tensor: te.Tensor, body: tirx.Reduce, index: list[tirx.PrimExpr], env: dict
    ) -> Expr:
        if self.epilogue_of is not None and _same_tensor(tensor, self.epilogue_of):
            if self.reduce_depth == 0 and self._is_identity(index):
                return {"op": "result"}
            raise UnsupportedOperatorError("the promoted reduction is read at a non-identity index")
        self.reduction_reads.append((tensor, list(index), self.reduce_depth))
        key = (_key(tensor.op), int(tensor.value_index), tuple(self._affine(i) for i in index))
        if key in self.memo:
            # The same reduction at the same point (softmax's max in numerator and in the
            # sum): share the node rather than inventing a second set of local axes.
            node = copy.deepcopy(self.memo[key])
            for load in expr_loads(node):
                self.inputs[load["input"]].readers.add(self.region)
            return node
        combiner = _combiner(body, tensor)
        if combiner not in ("sum", "max", "min"):
            raise UnsupportedOperatorError(
                f"reduction '{tensor.op.name}' has combiner {combiner}; only sum/max/min are supported"
            )
        env = dict(env)
        names = []
        for iv in body.axis:
            var = self._new_axis(iv.var.name, self._extent(iv, env), True, True)
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
            if not (_is_number(init) and _is_number(ident) and float(init.value) == float(ident.value)):
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
        if _is_tensor_load(e):
            index = [self._subst(i, env) for i in e.args[1:]]
            return self._load(e.args[0], index)
        if isinstance(e, tvm.ir.Var):
            bound = env.get(_key(e))
            if isinstance(bound, dict):  # a Let-bound value
                return copy.deepcopy(bound)
            return self._int_tree(self._subst(e, env))
        if isinstance(e, tirx.FloatImm):
            return _const(float(e.value))
        if isinstance(e, tirx.IntImm):
            return _const(int(e.value))
        if _is_index_arith(e):
            return self._int_tree(self._subst(e, env))
        if isinstance(e, tirx.Cast):
            return {"op": "cast", "dtype": str(e.ty.dtype), "args": [self._value(e.value, env)]}
        if isinstance(e, tirx.Div) and _is_int(e):
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
                self._subst(e.value, env) if _is_index_arith(e.value) else self._value(e.value, env)
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
        conjuncts = _conjuncts(cond)
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
        """Is ``cond ? then : 0`` exactly ``then`` read with zero fill out of bounds?"""
        if then_e.get("op") != "load" or other_e.get("op") != "const" or other_e["value"] != 0:
            return False
        entry = self.inputs[then_e["input"]]
        index = [AffineIndex.from_dict(i) for i in then_e["index"]]
        bounds = []
        for d, idx in enumerate(index):  # lower: idx >= 0, upper: shape-1-idx >= 0
            bounds.append(_affine_key(idx.terms, idx.offset))
            neg = tuple((a, -c) for a, c in idx.terms)
            bounds.append(_affine_key(neg, entry.source.shape[d] - 1 - idx.offset))
        for c in conjuncts:
            g = self._nonneg_form(c, env)
            if g is None:
                return False
            if g == "true":
                continue
            if _affine_key(g.terms, g.offset) not in bounds:
                return False
        return True

    def _nonneg_form(self, c: Any, env: Mapping) -> AffineIndex | str | None:
        """Rewrite an integer comparison as ``g >= 0`` with affine ``g`` (None if it is not)."""
        if isinstance(c, tirx.IntImm):
            return "true" if int(c.value) else None
        forms = {
            tirx.GE: lambda a, b: a - b, tirx.GT: lambda a, b: a - b - 1,
            tirx.LE: lambda a, b: b - a, tirx.LT: lambda a, b: b - a - 1,
        }
        build = forms.get(type(c))
        if build is None or not (_is_int(c.a) and _is_int(c.b)):
            return None
        try:
            a, b = self._subst(c.a, env), self._subst(c.b, env)
        except UnsupportedOperatorError:
            return None
        if self.analyzer.can_prove(type(c)(a, b)):
            return "true"  # holds everywhere in the iteration domain
        try:
            return self._affine(self.analyzer.simplify(build(a, b)))
        except UnsupportedOperatorError:
            return None


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _floordiv_divisors(body: Any) -> dict[int, set[int]]:
    """For each variable ``v`` that ``body`` divides as ``v // k`` (``k`` a constant), the ``k``s."""
    found: dict[int, set[int]] = {}

    def visit(node: Any) -> None:
        if isinstance(node.a, tvm.ir.Var) and isinstance(node.b, tirx.IntImm):
            found.setdefault(_key(node.a), set()).add(int(node.b.value))

    tvm_ffi.structural_walk(body, ((tirx.FloorDiv, visit),))
    return found


def _is_minmax_reduction(out: te.Tensor) -> bool:
    body = _body_of(out)
    return isinstance(body, tirx.Reduce) and _combiner(body, out) in ("max", "min")


def _free_output_axes(expr: TensorExpr) -> int:
    """Output axes a plan may partition (not pinned by the layout rules)."""
    pinned = pinned_axes(expr)
    return sum(1 for a in expr.axes if not a.reduce and a.name not in pinned)


def _only_sum_reduction(out: te.Tensor) -> te.Tensor | None:
    """The one sum reduction that the elementwise stages ending in ``out`` read, if exactly one."""
    if not isinstance(out.op, te.ComputeOp) or isinstance(_body_of(out), tirx.Reduce):
        return None
    found: list[te.Tensor] = []
    stack, seen = [out], set()
    while stack:
        t = stack.pop()
        if _key(t.op) in seen or not isinstance(t.op, te.ComputeOp):
            continue
        seen.add(_key(t.op))
        body = _body_of(t)
        if isinstance(body, tirx.Reduce) and t is not out:
            if not any(_same_tensor(t, f) for f in found):
                found.append(t)
            continue
        stack.extend(t.op.input_tensors)
    if len(found) != 1 or _combiner(_body_of(found[0]), found[0]) != "sum":
        return None
    return found[0]


def _same_tensor(a: te.Tensor, b: te.Tensor) -> bool:
    return a.op.same_as(b.op) and int(a.value_index) == int(b.value_index)


def _shape(t: te.Tensor) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


def _extent(iv: Any) -> int:
    dom = iv.dom
    if not (isinstance(dom.min, tirx.IntImm) and int(dom.min.value) == 0
            and isinstance(dom.extent, tirx.IntImm)):
        raise UnsupportedOperatorError(
            f"axis '{iv.var.name}' has a non-constant or shifted range {dom}"
        )
    return int(dom.extent.value)


def _body_of(t: te.Tensor) -> Any:
    return t.op.body[int(t.value_index)] if isinstance(t.op, te.ComputeOp) else None


def _is_number(e: Any) -> bool:
    return isinstance(e, (tirx.FloatImm, tirx.IntImm))


def _is_intrinsic(e: Any, short_name: str) -> bool:
    return (isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op)
            and e.op.name.rsplit(".", 1)[-1] == short_name)


def _is_tensor_load(e: Any) -> bool:
    return isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "te.tensor_load"


def _is_index_arith(e: Any) -> bool:
    """Integer arithmetic on iteration variables only (no tensor data involved)."""
    if not _is_int(e):
        return False
    if isinstance(e, (tvm.ir.Var, tirx.IntImm)):
        return True
    if isinstance(e, tirx.Cast):
        return _is_index_arith(e.value)
    if isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max)):
        return _is_index_arith(e.a) and _is_index_arith(e.b)
    if isinstance(e, tirx.Select) and isinstance(e.condition, tirx.IntImm):
        return _is_index_arith(e.true_value) and _is_index_arith(e.false_value)
    return False


def _is_int(e: Any) -> bool:
    try:
        return str(e.ty.dtype).startswith(("int", "uint"))
    except AttributeError:
        return False


def _const(v: float | int) -> Expr:
    return {"op": "const", "value": v}


def _affine_key(terms: Sequence[tuple[str, int]], offset: int) -> tuple:
    return (tuple(sorted((a, c) for a, c in terms if c)), int(offset))


def _conjuncts(cond: Any) -> list:
    if isinstance(cond, tirx.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    if _is_intrinsic(cond, "likely"):
        return _conjuncts(cond.args[0])
    return [cond]


def _combiner(body: tirx.Reduce, tensor: te.Tensor) -> str:
    """Name of the combiner of output ``value_index`` of a (possibly tuple) reduction."""
    comb = body.combiner
    vi = int(body.value_index)
    lhs, rhs, res = comb.lhs[vi], comb.rhs[vi], comb.result[vi]
    for cls, name in ((tirx.Add, "sum"), (tirx.Max, "max"), (tirx.Min, "min")):
        if type(res) is cls and (
            (res.a.same_as(lhs) and res.b.same_as(rhs)) or (res.a.same_as(rhs) and res.b.same_as(lhs))
        ):
            if name == "sum":
                ident = comb.identity_element[vi]
                if not (isinstance(ident, (tirx.FloatImm, tirx.IntImm)) and float(ident.value) == 0.0):
                    return "sum with a non-zero identity"
            return name
    return f"'{res}'"
