"""From an offloaded Relax operator to a :class:`~runtime_sim.program.TensorExpr`.

T10 plans every operator from its tensor expression (T10 §4.2, "Operator representation"):
the iteration axes, which of them are summed, and how each tensor dimension is indexed by
the axes -- possibly by a *compound axis* such as ``h*stride + kh*dilation - pad`` (T10 §5).
We never re-derive that by hand per operator: TVM already knows the TE of every Relax op
through its legalization (``FLegalize`` -> ``BlockBuilder.call_te``). This module

1. composes the TE of a small Relax function (a BYOC composite such as
   ``relu(matmul(x, permute_dims(w)) + b)``) into one TE DAG, by capturing the TE function
   each legalization hands to ``call_te`` and re-invoking it on ``te.placeholder`` tensors we
   control (function params), the output of op *i* feeding op *i+1*;
2. converts that DAG to a :class:`TensorExpr`: injective producers (transpose, broadcast,
   expand_dims, padding) are inlined into affine index maps, elementwise producers into the
   body, inner reductions into core-local ``reduce`` nodes, and a sum reduction read at the
   identity index by an elementwise result becomes the top-level (splittable) reduction with
   the rest as its ``epilogue``.

Refused with :class:`~runtime_sim.errors.UnsupportedOperatorError`: non-affine indices
(a reshape that merges or splits non-unit dims, grouped convolution's ``ff // (F/groups)``),
data-dependent indices (take, gather), reductions other than sum/max/min (prod, argmax's
tuple reducer), conditional max/min reductions, tuple results (split), dynamic shapes, and
ops without a TVM legalization. Tensors that are neither float32 nor float16 raise
:class:`~runtime_sim.errors.UnsupportedDtypeError`.

Axis names are TVM's own iteration variable names (``i0, i1, k`` for matmul, ``nn, ff, yy,
xx, rc, ry, rx`` for conv2d, ``ax0, k1`` for topi reductions), suffixed ``_1, _2`` where
they would clash.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, te, tirx
from tvm.sym import Analyzer

from runtime_sim.errors import IccaError, UnsupportedDtypeError, UnsupportedOperatorError
from runtime_sim.program import AffineIndex, Axis, Expr, TensorAccess, TensorExpr, expr_loads

from .relax_types import static_shape

__all__ = [
    "ComposedTE",
    "ExtractedOp",
    "SUPPORTED_DTYPES",
    "compose_te",
    "extract_op",
    "kind_of",
    "tensor_expr_of",
]

SUPPORTED_DTYPES = ("float32", "float16")

# Template kind per Relax op, most specific first: the kind of a function is the one of its
# highest-ranked op whose template fits the extracted structure (a composite "conv2d + bias +
# relu" is a conv2d). Ops not listed here (permute_dims, add, relu, ...) do not decide the
# template; when no listed op fits, the structure decides (see _structural_kind).
_KIND_RANK: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("conv2d", ("relax.nn.conv2d",)),
    ("matmul", ("relax.matmul",)),
    ("softmax", ("relax.nn.softmax", "relax.nn.log_softmax")),
    ("layer_norm", ("relax.nn.layer_norm", "relax.nn.rms_norm")),
    ("reduce", ("relax.sum", "relax.mean", "relax.max", "relax.min", "relax.variance",
                "relax.std")),
)

_UNARY_INTRINSICS = {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh",
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


@dataclass(frozen=True)
class ExtractedOp:
    """A :class:`TensorExpr` plus where each of its inputs comes from.

    ``param_of_input[i]`` is the index (in ``func.params``) of the parameter that
    ``expr.inputs[i]`` reads, or ``None`` when that input is a constant baked into the
    function; its value is then ``constants[i]``. A parameter can back two inputs when the
    body reads it through two index maps that cannot share one partitioning.
    """

    expr: TensorExpr
    param_of_input: tuple[int | None, ...]
    constants: Mapping[int, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class ComposedTE:
    """The TE DAG of a Relax function: its params as placeholders and its result tensor."""

    placeholders: tuple[te.Tensor, ...]  # one per function param, in param order
    output: te.Tensor
    op_names: tuple[str, ...]  # Relax ops of the function, in binding order
    constants: tuple[tuple[te.Tensor, np.ndarray], ...] = ()


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
    sources = _sources(func, composed)
    out = composed.output
    _check_dtype(str(out.dtype), f"output of {_func_label(func)}")
    if len(out.shape) and any(not isinstance(s, tirx.IntImm) for s in out.shape):
        raise UnsupportedOperatorError(f"{_func_label(func)} has a dynamic output shape")

    probe = _Converter(sources)
    probe.build(out, name)
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
    return ExtractedOp(
        expr=expr,
        param_of_input=tuple(e.source.param for e in conv.inputs),
        constants={
            i: e.source.constant for i, e in enumerate(conv.inputs) if e.source.constant is not None
        },
    )


def kind_of(op_names: Sequence[str], expr: TensorExpr | None = None) -> str:
    """The template kind (a :mod:`schedules` name) of a function with these Relax ops.

    The highest-ranked op decides, provided its template fits ``expr`` (a matmul whose sum
    ended up core-local inside a softmax is not run as a GEMM); otherwise the structure of
    ``expr`` decides: a sum of products of two tensors is 'matmul' ('conv2d' when read
    through compound indices), any other reduction is 'reduce', the rest 'elementwise'.
    """
    names = set(op_names)
    for kind, ops in _KIND_RANK:
        if names.intersection(ops) and (expr is None or _kind_fits(kind, expr)):
            return kind
    return "elementwise" if expr is None else _structural_kind(expr)


def _is_product_of_loads(expr: TensorExpr) -> bool:
    def factors(node: Expr) -> list[Expr] | None:
        if node["op"] == "mul":
            parts = [factors(a) for a in node["args"]]
            return None if any(p is None for p in parts) else [f for p in parts for f in p]
        if node["op"] == "cast":
            return factors(node["args"][0])
        return [node] if node["op"] == "load" else None

    loads = factors(expr.body)
    return loads is not None and len(loads) == 2


def _kind_fits(kind: str, expr: TensorExpr) -> bool:
    reduces = bool(expr.reduce_axes) or bool(expr.local_axes)
    if kind in ("matmul", "conv2d"):
        return bool(expr.reduce_axes) and _is_product_of_loads(expr)
    if kind == "reduce":
        return reduces
    if kind == "elementwise":
        return not reduces
    return True


def _structural_kind(expr: TensorExpr) -> str:
    if expr.reduce_axes and _is_product_of_loads(expr):
        compound = any(len(i.terms) > 1 for t in expr.inputs for i in t.indices)
        return "conv2d" if compound else "matmul"
    if expr.reduce_axes or expr.local_axes:
        return "reduce"
    return "elementwise"


def compose_te(func: relax.Function) -> ComposedTE:
    """Compose the TE of every op of ``func`` into one DAG over ``te.placeholder`` params.

    For each binding ``v = op(args)`` we run the op's registered ``FLegalize`` on a real
    :class:`relax.BlockBuilder`, capture the TE function it passes to ``call_te`` and call
    that function again with the TE tensors of ``args`` (placeholders for params, earlier
    results otherwise). Nothing is re-derived by hand: the TE is exactly what
    ``relax.transform.LegalizeOps`` would compile.
    """
    return _Composer(func).run()


# ---------------------------------------------------------------------------------------------
# Step 1: Relax function -> TE DAG
# ---------------------------------------------------------------------------------------------

_ORIGINAL_CALL_TE = relax.BlockBuilder.call_te
_PATCH_LOCK = threading.Lock()
_PATCH_DEPTH = 0
_ACTIVE = threading.local()  # .recorder: the _Composer capturing on this thread, if any


def _capturing_call_te(self: relax.BlockBuilder, func: Callable, *args: Any, **kwargs: Any):
    # The legalization functions are Python callables reached through the FFI, so the
    # builder they receive is a fresh wrapper of ours: subclassing BlockBuilder cannot
    # intercept them, a class-level hook can. It still builds the real call_tir (so
    # ``emit``/``normalize`` keep working) and only records how it was made.
    result = _ORIGINAL_CALL_TE(self, func, *args, **kwargs)
    recorder = getattr(_ACTIVE, "recorder", None)
    if recorder is not None:
        recorder.record(result, func, args, kwargs)
    return result


@contextlib.contextmanager
def _capture(recorder: "_Composer") -> Iterator[None]:
    """Route ``BlockBuilder.call_te`` of this thread to ``recorder`` while active."""
    global _PATCH_DEPTH
    with _PATCH_LOCK:
        if _PATCH_DEPTH == 0:
            relax.BlockBuilder.call_te = _capturing_call_te
        _PATCH_DEPTH += 1
    previous = getattr(_ACTIVE, "recorder", None)
    _ACTIVE.recorder = recorder
    try:
        yield
    finally:
        _ACTIVE.recorder = previous
        with _PATCH_LOCK:
            _PATCH_DEPTH -= 1
            if _PATCH_DEPTH == 0:
                relax.BlockBuilder.call_te = _ORIGINAL_CALL_TE


@dataclass
class _CallTeRecord:
    call: relax.Expr  # the call_tir expression the original call_te returned
    func: Callable
    args: tuple
    kwargs: dict
    outputs: Any = None  # our TE tensor(s), filled on first use


class _Composer:
    """Evaluates a Relax function symbolically, each value being a TE tensor (or tuple)."""

    _MAX_DEPTH = 16  # legalizations that return other Relax ops, nested at most this deep

    def __init__(self, func: relax.Function):
        if not isinstance(func, relax.Function):
            raise UnsupportedOperatorError(f"expected a relax.Function, got {type(func).__name__}")
        self.func = func
        self.bb = relax.BlockBuilder()
        # Legalizations may ``emit``, which needs an open block; run() closes it again (TVM
        # warns about builders destroyed with open blocks).
        self.bb._begin_binding_block()
        self.env: dict[int, Any] = {}  # Relax var handle -> TE tensor / tuple
        self.records: list[_CallTeRecord] = []
        self.op_names: list[str] = []
        self.constants: list[tuple[te.Tensor, np.ndarray, Any]] = []
        self.depth = 0

    # -- capture --------------------------------------------------------------------------
    def record(self, call: relax.Expr, func: Callable, args: tuple, kwargs: dict) -> None:
        kwargs = dict(kwargs)
        kwargs.pop("primfunc_name_hint", None)
        kwargs.pop("primfunc_attrs", None)
        self.records.append(_CallTeRecord(call, func, args, kwargs))

    def run(self) -> ComposedTE:
        placeholders = []
        try:
            for i, param in enumerate(self.func.params):
                ph = self._placeholder(param, f"param {i} '{param.name}'")
                self.env[_key(param)] = ph
                placeholders.append(ph)
            out = self._eval_body(self.func.body)
        finally:
            self.bb._end_block()
        if not isinstance(out, te.Tensor):
            raise UnsupportedOperatorError(
                f"{_func_label(self.func)} returns a tuple; only single-output operators "
                "can be converted to one tensor expression"
            )
        return ComposedTE(
            placeholders=tuple(placeholders),
            output=out,
            op_names=tuple(self.op_names),
            constants=tuple((t, v) for t, v, _ in self.constants),
        )

    def _placeholder(self, var: relax.Expr, what: str) -> te.Tensor:
        ty = var.ty
        shape = static_shape(ty)
        if shape is None:
            raise UnsupportedOperatorError(f"{what} is not a tensor of known, static shape ({ty})")
        return te.placeholder(shape, str(ty.dtype), name=getattr(var, "name", None) or "const")

    def _eval_body(self, body: relax.Expr) -> Any:
        if isinstance(body, relax.SeqExpr):
            for block in body.blocks:
                for binding in block.bindings:
                    if not isinstance(binding, relax.VarBinding):
                        raise UnsupportedOperatorError(
                            f"{type(binding).__name__} in {_func_label(self.func)} is not supported"
                        )
                    self.env[_key(binding.var)] = self._eval(binding.value)
            return self._eval(body.body)
        return self._eval(body)

    # -- evaluation -----------------------------------------------------------------------
    def _eval(self, expr: Any) -> Any:
        if isinstance(expr, relax.Var):
            k = _key(expr)
            if k not in self.env:
                bound = self.bb.lookup_binding(expr)
                if bound is None:
                    raise UnsupportedOperatorError(
                        f"free variable '{expr.name}' in {_func_label(self.func)}"
                    )
                self.env[k] = self._eval(bound)
            return self.env[k]
        if isinstance(expr, tvm.ir.GenericConst):
            return self._constant(expr)
        if isinstance(expr, relax.Tuple):
            return tuple(self._eval(f) for f in expr.fields)
        if isinstance(expr, relax.TupleGetItem):
            return self._eval(expr.tuple_value)[int(expr.index)]
        if isinstance(expr, relax.Call):
            return self._eval_call(expr)
        if isinstance(expr, relax.Function):  # a local composite, called later
            return expr
        raise UnsupportedOperatorError(
            f"{type(expr).__name__} in {_func_label(self.func)} is not supported"
        )

    def _constant(self, const: Any) -> te.Tensor:
        for t, _, c in self.constants:
            if c.same_as(const):
                return t
        ph = self._placeholder(const, "constant")
        value = const.value.numpy()
        self.constants.append((ph, value, const))
        return ph

    def _eval_call(self, call: relax.Call) -> Any:
        op = call.op
        if isinstance(op, tvm.ir.Op) and op.name == "relax.call_tir":
            for rec in self.records:
                if rec.call.same_as(call):
                    return self._invoke(rec)
            for rec in self.records:  # re-created by normalization on emit
                if tvm_ffi.structural_equal(rec.call, call):
                    return self._invoke(rec)
            raise UnsupportedOperatorError(
                f"{_func_label(self.func)} calls a TIR function directly; only Relax ops are supported"
            )
        if isinstance(op, relax.Var):
            op = self._eval(op)
        if isinstance(op, relax.Function):
            # A composite nested in a merged-region wrapper: evaluate it inline (handles are
            # unique, so its params can share our environment).
            for param, arg in zip(op.params, call.args):
                self.env[_key(param)] = self._eval(arg)
            return self._eval_body(op.body)
        if not isinstance(op, tvm.ir.Op):
            raise UnsupportedOperatorError(f"call to {op} in {_func_label(self.func)} is not supported")
        return self._legalize(call)

    def _legalize(self, call: relax.Call) -> Any:
        op = call.op
        self.op_names.append(op.name)
        legalize = op.get_attr("FLegalize")
        if legalize is None:
            raise UnsupportedOperatorError(f"TVM has no legalization (TE) for '{op.name}'")
        if self.depth >= self._MAX_DEPTH:
            raise UnsupportedOperatorError(f"legalization of '{op.name}' does not terminate")
        call = self.bb.normalize(call)  # legalizations read call.ty
        with _capture(self):
            try:
                lowered = legalize(self.bb, call)
            except IccaError:
                raise
            except Exception as err:  # TVM's own refusal (unsupported layout, dtype, ...)
                raise UnsupportedOperatorError(f"TVM cannot legalize '{op.name}': {err}") from err
        if isinstance(lowered, relax.Call) and lowered.same_as(call):
            raise UnsupportedOperatorError(
                f"TVM leaves '{op.name}' unlegalized for these attributes ({call.attrs})"
            )
        self.depth += 1
        try:
            return self._eval(lowered)
        finally:
            self.depth -= 1

    def _invoke(self, rec: _CallTeRecord) -> Any:
        if rec.outputs is None:
            args = [self._te_arg(a) for a in rec.args]
            kwargs = {k: self._te_arg(v) for k, v in rec.kwargs.items()}
            try:
                out = rec.func(*args, **kwargs)
            except IccaError:
                raise
            except Exception as err:
                raise UnsupportedOperatorError(
                    f"TVM's TE function failed on our tensors: {err}"
                ) from err
            rec.outputs = tuple(out) if isinstance(out, (list, tuple, tvm_ffi.Array)) else out
        return rec.outputs

    def _te_arg(self, arg: Any) -> Any:
        """Mirror of TVM's own call_te argument conversion, with our tensors substituted."""
        if isinstance(arg, relax.ShapeExpr):
            return [self._te_arg(v) for v in arg.values]
        if tvm.ir.is_prim_expr(arg):
            if isinstance(arg, tvm.ir.Var):
                raise UnsupportedOperatorError(f"symbolic value '{arg}' in an operator argument")
            return arg
        if isinstance(arg, relax.Expr):
            # TVM turns tensor-typed values into TE tensors and anything else into None.
            return self._eval(arg) if isinstance(arg.ty, relax.TensorType) else None
        if isinstance(arg, (list, tvm_ffi.Array)):
            return [self._te_arg(a) for a in arg]
        if isinstance(arg, tuple):
            return tuple(self._te_arg(a) for a in arg)
        if isinstance(arg, (dict, tvm_ffi.Map)):
            return {k: self._te_arg(arg[k]) for k in arg}
        return arg


# ---------------------------------------------------------------------------------------------
# Step 2: TE DAG -> TensorExpr
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

    def __init__(self, sources: Mapping[int, _Source], epilogue_of: te.Tensor | None = None):
        self.sources = sources
        self.epilogue_of = epilogue_of  # the sum reduction promoted to the top level
        self.analyzer = Analyzer()
        self.axes: list[Axis] = []
        self.local_axes: list[Axis] = []
        self.axis_vars: dict[str, tirx.Var] = {}
        self.order: dict[str, int] = {}
        self.spatial: list[tirx.Var] = []
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

    # -- top level ------------------------------------------------------------------------
    def build(self, out: te.Tensor, name: str) -> None:
        shape = _shape(out)
        if self.epilogue_of is not None:
            self._build_with_epilogue(out, shape)
            return
        op = out.op
        names = [iv.var.name for iv in op.axis] if isinstance(op, te.ComputeOp) else []
        names += [f"i{d}" for d in range(len(names), len(shape))]
        self.spatial = [self._new_axis(n, e, False, False) for n, e in zip(names, shape)]
        body = _body_of(out)
        if isinstance(body, tirx.Reduce) and _combiner(body, out) == "sum":
            # Mode (a): the result is itself a sum reduction (matmul, conv2d, sum).
            env = {_key(iv.var): v for iv, v in zip(op.axis, self.spatial)}
            for iv in body.axis:
                env[_key(iv.var)] = self._new_axis(iv.var.name, _extent(iv), True, False)
            self.body = self._reduce_source(body, env)
            return
        # Mode (c): elementwise result; any reduction inside stays core-local.
        self.body = self._load(out, list(self.spatial))

    def _build_with_epilogue(self, out: te.Tensor, shape: tuple[int, ...]) -> None:
        # Mode (b): the promoted reduction's axes are the top-level axes; it is read at the
        # identity index, so its spatial axes are the output's.
        red = self.epilogue_of
        body = _body_of(red)
        self.spatial = [
            self._new_axis(iv.var.name, e, False, False) for iv, e in zip(red.op.axis, shape)
        ]
        env = {_key(iv.var): v for iv, v in zip(red.op.axis, self.spatial)}
        for iv in body.axis:
            env[_key(iv.var)] = self._new_axis(iv.var.name, _extent(iv), True, False)
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
        return len(index) == len(self.spatial) and all(
            self._affine(i) == AffineIndex.of_axis(v.name) for i, v in zip(index, self.spatial)
        )

    def finish(self, op_names: Sequence[str], out: te.Tensor, name: str) -> TensorExpr:
        if self.body is None:
            raise UnsupportedOperatorError("nothing was converted")
        for entry in self.inputs:
            _check_dtype(entry.source.dtype, f"input '{entry.source.name}'")
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
                tuple(AffineIndex.of_axis(v.name) for v in self.spatial),
            ),
            body=self.body,
            local_axes=tuple(self.local_axes),
            epilogue=self.epilogue,
            epilogue_inputs=epilogue_inputs,
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
        """An integer value (e.g. an axis used in a comparison) as an expression tree."""
        idx = self._affine(e, "integer expression")
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
            var = self._new_axis(iv.var.name, _extent(iv), True, True)
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


def _key(obj: Any) -> int:
    """Identity of an FFI object (Python wrappers are recreated at every FFI crossing)."""
    return obj.__chandle__()


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


def _check_dtype(dtype: str, what: str) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise UnsupportedDtypeError(
            f"{what} has dtype {dtype}; the ICCA device computes only {', '.join(SUPPORTED_DTYPES)}"
        )


def _func_label(func: relax.Function) -> str:
    attrs = func.attrs
    for key in ("Composite", "global_symbol"):
        if attrs is not None and key in attrs:
            return f"function '{attrs[key]}'"
    return "the function"
