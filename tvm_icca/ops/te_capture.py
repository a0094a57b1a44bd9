"""Capturing the TE of a Relax function from TVM's own legalization.

T10 plans every operator from its tensor expression (T10 §4.2). We never re-derive the TE of
an op by hand: TVM already knows it through its legalization (``FLegalize`` ->
``BlockBuilder.call_te``). :func:`compose_te` composes the TE of a small Relax function (a
BYOC composite such as ``relu(matmul(x, permute_dims(w)) + b)``) into one TE DAG
(:class:`ComposedTE`), by capturing the TE function each legalization hands to ``call_te``
and re-invoking it on ``te.placeholder`` tensors we control (function params), the output of
op *i* feeding op *i+1*. :mod:`tvm_icca.lower.te_to_expr` converts that DAG to a
:class:`~runtime_sim.contract.expr.TensorExpr`.

The capture patches ``relax.BlockBuilder.call_te`` at class level while a composition runs
(the legalization functions are Python callables reached through the FFI, so subclassing
cannot intercept them). The patch is thread-safe and re-entrant: it is installed by the first
active capture and removed by the last, and each thread records only into its own
composer, so concurrent compilations neither see each other's calls nor leave the builder
patched.

Refused with :class:`~runtime_sim.contract.errors.UnsupportedOperatorError`: tuple results (split),
params or constants of dynamic shape, Relax constructs other than plain bindings, direct
``call_tir`` calls and ops without a TVM legalization.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, te

from runtime_sim.contract.errors import IccaError, UnsupportedOperatorError
from tvm_icca.ops.relax_types import static_shape
from tvm_icca.tvm_warnings import tvm_warnings_once

__all__ = ["ComposedTE", "compose_te", "ffi_key", "function_label"]


@dataclass(frozen=True)
class ComposedTE:
    """The TE DAG of a Relax function: its params as placeholders and its result tensor."""

    placeholders: tuple[te.Tensor, ...]  # one per function param, in param order
    output: te.Tensor
    op_names: tuple[str, ...]  # Relax ops of the function, in binding order
    constants: tuple[tuple[te.Tensor, np.ndarray], ...] = ()
    #: the TE value of every Relax variable of the function (params and bindings), by
    #: :func:`ffi_key` of the variable: a reader of one operator family finds the stages of
    #: a named binding there (the softmax inside fused attention, :mod:`tvm_icca.lower.te_attention`)
    values: Mapping[int, Any] = field(default_factory=dict)


def compose_te(func: relax.Function) -> ComposedTE:
    """Compose the TE of every op of ``func`` into one DAG over ``te.placeholder`` params.

    For each binding ``v = op(args)`` we run the op's registered ``FLegalize`` on a real
    :class:`relax.BlockBuilder`, capture the TE function it passes to ``call_te`` and call
    that function again with the TE tensors of ``args`` (placeholders for params, earlier
    results otherwise). Nothing is re-derived by hand: the TE is exactly what
    ``relax.transform.LegalizeOps`` would compile. The TE functions run twice per op here
    (and the op was legalized once already when partitioning), so TVM's C++ warnings are said
    once (:func:`tvm_icca.tvm_warnings.tvm_warnings_once`).
    """
    with tvm_warnings_once():
        return _Composer(func).run()


# ---------------------------------------------------------------------------------------------
# Relax function -> TE DAG
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
                self.env[ffi_key(param)] = ph
                placeholders.append(ph)
            out = self._eval_body(self.func.body)
        finally:
            self.bb._end_block()
        if not isinstance(out, te.Tensor):
            raise UnsupportedOperatorError(
                f"{function_label(self.func)} returns a tuple; only single-output operators "
                "can be converted to one tensor expression"
            )
        return ComposedTE(
            placeholders=tuple(placeholders),
            output=out,
            op_names=tuple(self.op_names),
            constants=tuple((t, v) for t, v, _ in self.constants),
            values=dict(self.env),
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
                            f"{type(binding).__name__} in {function_label(self.func)} is not supported"
                        )
                    self.env[ffi_key(binding.var)] = self._eval(binding.value)
            return self._eval(body.body)
        return self._eval(body)

    # -- evaluation -----------------------------------------------------------------------
    def _eval(self, expr: Any) -> Any:
        if isinstance(expr, relax.Var):
            k = ffi_key(expr)
            if k not in self.env:
                bound = self.bb.lookup_binding(expr)
                if bound is None:
                    raise UnsupportedOperatorError(
                        f"free variable '{expr.name}' in {function_label(self.func)}"
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
            f"{type(expr).__name__} in {function_label(self.func)} is not supported"
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
                f"{function_label(self.func)} calls a TIR function directly; only Relax ops are supported"
            )
        if isinstance(op, relax.Var):
            op = self._eval(op)
        if isinstance(op, relax.Function):
            # A composite nested in a merged-region wrapper: evaluate it inline (handles are
            # unique, so its params can share our environment).
            for param, arg in zip(op.params, call.args):
                self.env[ffi_key(param)] = self._eval(arg)
            return self._eval_body(op.body)
        if not isinstance(op, tvm.ir.Op):
            raise UnsupportedOperatorError(f"call to {op} in {function_label(self.func)} is not supported")
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
# Helpers (shared with tvm_icca.lower.te_to_expr)
# ---------------------------------------------------------------------------------------------


def ffi_key(obj: Any) -> int:
    """Identity of an FFI object (Python wrappers are recreated at every FFI crossing)."""
    return obj.__chandle__()


def function_label(func: relax.Function) -> str:
    """How error messages name a Relax function: its composite pattern or global symbol."""
    attrs = func.attrs
    for key in ("Composite", "global_symbol"):
        if attrs is not None and key in attrs:
            return f"function '{attrs[key]}'"
    return "the function"
