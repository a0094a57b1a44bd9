"""Relax rewrites that give written-out activations their names back, before partitioning.

Exporters write activations out op by op, and TVM's ONNX importer lowers ``Clip`` (opsets
6-13) to opaque ``call_tir`` calls of ``maximum`` / ``minimum`` PrimFuncs, so no ICCA pattern
sees them. :func:`RecognizeActivations` turns them back into the Relax ops the patterns of
:mod:`tvm_icca.partition.patterns` know, so they run on the chip and fuse as matmul / conv2d epilogues:

* ``call_tir`` of an elementwise ``max`` / ``min`` with a scalar (the PrimFunc is read and
  accepted only in that exact form) -> ``relax.maximum`` / ``relax.minimum``;
* ``minimum(maximum(x, lo), hi)`` with constant scalars ``lo <= hi`` -> ``relax.clip``
  (ReLU6 is ``clip(x, 0, 6)``; ONNX HardSigmoid and HardSwish import as ``clip`` already);
* ``x * 0.5 * (1 + erf(x / sqrt(2)))`` in any order and association, also with
  ``x * (1/sqrt(2))`` and ``(...) / 2`` -> ``relax.nn.gelu`` (BERT and ViT exports);
* ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`` -> ``relax.nn.gelu_tanh``
  (GPT-2's ``gelu_new``; the tanh approximation of Hendrycks & Gimpel, arXiv:1606.08415 §2);
* ``x * sigmoid(x)`` -> ``relax.nn.silu`` (SwiGLU's gate, ``silu(a) * b``, then merges
  into the region of the gate's matmul as an elementwise multiply).

:func:`RecognizeNorms` does the same for normalizations written out over the last axis:

* ``w * (x * 1/sqrt(mean(x**2) + eps))`` (also ``x * rsqrt(...)``, ``x / sqrt(...)``,
  ``x * x`` for the square) -> ``relax.nn.rms_norm`` (Llama / Gemma exports, Zhang &
  Sennrich, arXiv:1910.07467 eq. 4);
* ``(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps) * gamma + beta`` ->
  ``relax.nn.layer_norm`` (what torch exports for ``nn.LayerNorm`` below opset 17, e.g.
  Hugging Face BERT at its default opset 14).

Constants are checked by value: a written-out constant must equal the exact one within one
unit in the last place of the tensor's dtype (the exact constant rounded to the storage
format), and never closer than 1e-6 relative, which admits constants printed with seven
significant digits. Patterns use :mod:`tvm.relax.dpl`, whose matcher tries both operand
orders of ``add`` and ``multiply``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.ir import IRModule
from tvm.relax.dpl import DFPattern, is_const, is_op, rewrite_call, wildcard
from tvm.s_tir.stmt import SBlock

__all__ = ["RecognizeActivations", "RecognizeNorms", "constant_matches", "drop_unused_primfuncs",
           "replacing_calls", "rewrite_functions"]

#: 1e-6 relative admits a constant printed with 7 significant digits (1.414214 for sqrt 2).
_MIN_RTOL = 1e-6

_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
#: The cubic coefficient of the tanh approximation of GELU (arXiv:1606.08415 §2).
_GELU_CUBIC = 0.044715


def constant_matches(expr: relax.Expr, value: float) -> bool:
    """Is ``expr`` a constant whose every element equals ``value`` up to the rounding of its
    dtype (one unit in the last place, at least 1e-6 relative)?"""
    if not isinstance(expr, tvm.ir.GenericConst):
        return False
    array = expr.value.numpy()
    if array.size == 0 or not _is_float(str(array.dtype)):
        return False
    rtol = max(float(_finfo(str(array.dtype)).eps), _MIN_RTOL)
    data = array.astype(np.float64)
    return bool(np.all(np.abs(data - value) <= rtol * abs(value)))


def _finfo(dtype: str) -> np.finfo:
    if dtype == "bfloat16":
        import ml_dtypes  # numpy has no bfloat16; TVM and onnx depend on ml_dtypes for it

        return ml_dtypes.finfo(ml_dtypes.bfloat16)
    return np.finfo(np.dtype(dtype))


def _is_float(dtype: str) -> bool:
    return dtype in ("float16", "bfloat16", "float32", "float64")


def _scalar(expr: relax.Expr) -> float | None:
    """The value of a constant scalar (rank 0 or a single element), else ``None``."""
    if not isinstance(expr, tvm.ir.GenericConst):
        return None
    array = expr.value.numpy()
    return float(array.reshape(-1)[0]) if array.size == 1 else None


def _float_tensor(expr: relax.Expr) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and _is_float(str(ty.dtype))


def _same_shape(a: relax.Expr, b: relax.Expr) -> bool:
    """Both tensors of the same static shape (a scalar operand did not broadcast ``a`` up)."""
    sa, sb = a.ty.shape, b.ty.shape
    return sa is not None and sb is not None and tvm_ffi.structural_equal(sa, sb)


def _mul(a: DFPattern, b: DFPattern) -> DFPattern:
    return is_op("relax.multiply")(a, b)


def _add(a: DFPattern, b: DFPattern) -> DFPattern:
    return is_op("relax.add")(a, b)


# -- call_tir of maximum / minimum -----------------------------------------------------------
@dataclass(frozen=True)
class _MinMax:
    """A PrimFunc computing ``out[i] = max|min(in[data][i], scalar)``."""

    op: str  # "relax.maximum" / "relax.minimum"
    data: int  # position of the tensor among the call_tir inputs
    scalar: float | int  # a literal (float) or the position of a rank-0 input (int)


def read_minmax_primfunc(func: tirx.PrimFunc) -> _MinMax | None:
    """Recognize the PrimFunc of an elementwise max/min of a tensor with a scalar.

    Accepted only in the exact form ``topi.maximum`` / ``topi.minimum`` give it: one
    spatial block over the whole output, storing at the block's own indices the max/min of
    the data tensor read at the same indices and a literal or a rank-0 input.
    """
    # In TVM 0.27 a PrimFunc's params are its buffers (``Var`` s with a shape) and a read is
    # a ``tvm.ir.TensorLoad`` of its ``source`` buffer.
    buffers = list(func.params)
    if len(buffers) < 2 or any(not hasattr(b, "shape") for b in buffers):
        return None
    out = buffers[-1]
    stores: list[tirx.BufferStore] = []
    blocks: list[SBlock] = []
    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, stores.append), (SBlock, blocks.append)])
    compute = [b for b in blocks if b.name_hint != "root"]
    if len(stores) != 1 or len(compute) != 1 or compute[0].init is not None:
        return None
    store, block = stores[0], compute[0]
    iter_vars = list(block.iter_vars)
    if not store.buffer.same_as(out) or len(store.indices) != len(iter_vars) != len(out.shape):
        return None
    for iv, index, extent in zip(iter_vars, store.indices, out.shape):
        if int(iv.iter_type) != 0 or not index.same_as(iv.var):  # 0: data-parallel
            return None
        if not (isinstance(iv.dom.extent, tirx.IntImm) and isinstance(extent, tirx.IntImm)
                and int(iv.dom.extent) == int(extent) and int(iv.dom.min) == 0):
            return None
    value = store.value
    op = {tirx.Max: "relax.maximum", tirx.Min: "relax.minimum"}.get(type(value))
    if op is None:
        return None
    inputs = buffers[:-1]
    for data_load, other in ((value.a, value.b), (value.b, value.a)):
        data = _input_position(data_load, inputs)
        if data is None or not _reads_at(data_load, store.indices):
            continue
        if not tvm_ffi.structural_equal(inputs[data].shape, out.shape):
            continue
        if isinstance(other, tirx.FloatImm):
            return _MinMax(op, data, float(other.value))
        scalar = _input_position(other, inputs)
        if scalar is not None and len(inputs[scalar].shape) == 0 and scalar != data:
            return _MinMax(op, data, scalar)
    return None


def _input_position(expr: tirx.PrimExpr, inputs: list[tvm.ir.Var]) -> int | None:
    if not isinstance(expr, tvm.ir.TensorLoad):
        return None
    for i, buf in enumerate(inputs):
        if expr.source.same_as(buf):
            return i
    return None


def _reads_at(load: tvm.ir.TensorLoad, indices) -> bool:
    return len(load.indices) == len(indices) and all(a.same_as(b) for a, b in zip(load.indices, indices))


def _minmax_rewriter(mod: IRModule) -> tuple[DFPattern, Callable]:
    call = is_op("relax.call_tir")(wildcard(), wildcard())

    def rewrite(orig: relax.Call, _: dict) -> relax.Expr:
        gvar, args = orig.args[0], orig.args[1]
        if not isinstance(gvar, tvm.ir.GlobalVar) or not isinstance(args, relax.Tuple):
            return orig
        prim = mod[gvar] if gvar in mod.get_global_vars() else None
        if not isinstance(prim, tirx.PrimFunc):
            return orig
        found = read_minmax_primfunc(prim)
        if found is None:
            return orig
        data = args.fields[found.data]
        if not _float_tensor(data) or not _float_tensor(orig) or data.ty.dtype != orig.ty.dtype:
            return orig
        if isinstance(found.scalar, float):
            scalar = relax.const(found.scalar, str(data.ty.dtype))
        else:
            scalar = args.fields[found.scalar]
        op = relax.op.maximum if found.op == "relax.maximum" else relax.op.minimum
        return op(data, scalar)

    return call, rewrite


# -- clip ------------------------------------------------------------------------------------
def _clip_rewriter() -> tuple[DFPattern, Callable]:
    x, lo, hi = wildcard(), is_const(), is_const()
    max_then_min = is_op("relax.minimum")(is_op("relax.maximum")(x, lo), hi)
    min_then_max = is_op("relax.maximum")(is_op("relax.minimum")(x, hi), lo)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        data, low, high = m[x], _scalar(m[lo]), _scalar(m[hi])
        # lo > hi: the two orders differ (and clip would be neither); infinite bounds are a
        # one-sided clamp that stays a maximum or minimum
        if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
            return orig
        if low > high or not _float_tensor(data) or not _same_shape(data, orig):
            return orig
        dtype = str(data.ty.dtype)
        return relax.op.clip(data, relax.prim_value(tirx.FloatImm(dtype, low)),
                             relax.prim_value(tirx.FloatImm(dtype, high)))

    return max_then_min | min_then_max, rewrite


# -- GELU and SiLU ---------------------------------------------------------------------------
def _times_half(x: DFPattern, rest: DFPattern, half: DFPattern, two: DFPattern) -> DFPattern:
    """``x * rest * 0.5`` in every association, or ``x * rest / 2``."""
    return (
        _mul(_mul(x, rest), half)
        | _mul(_mul(x, half), rest)
        | _mul(x, _mul(rest, half))
        | is_op("relax.divide")(_mul(x, rest), two)
        | _mul(is_op("relax.divide")(x, two), rest)
    )


def _gelu_rewriter(tanh_form: bool) -> tuple[DFPattern, Callable]:
    x, one, half, two = wildcard(), is_const(), is_const(), is_const()
    checks: list[tuple[DFPattern, float]] = [(one, 1.0)]
    if tanh_form:
        cubic, scale, three = is_const(), is_const(), is_const()
        cube = is_op("relax.power")(x, three) | _mul(_mul(x, x), x)
        inner = _mul(scale, _add(x, _mul(cubic, cube)))
        core = is_op("relax.tanh")(inner)
        checks += [(cubic, _GELU_CUBIC), (scale, _SQRT_2_OVER_PI)]
        optional = [(three, 3.0)]
    else:
        by_div, by_mul = is_const(), is_const()
        core = is_op("relax.erf")(is_op("relax.divide")(x, by_div) | _mul(x, by_mul))
        optional = [(by_div, _SQRT2), (by_mul, 1.0 / _SQRT2)]
    pattern = _times_half(x, _add(core, one), half, two)
    optional += [(half, 0.5), (two, 2.0)]
    make = relax.op.nn.gelu_tanh if tanh_form else relax.op.nn.gelu

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        data = m[x]
        if not _float_tensor(data) or not _same_shape(data, orig):
            return orig
        if not all(constant_matches(m[p], v) for p, v in checks):
            return orig
        # of each alternative, the constant that matched must have the right value
        if not all(constant_matches(m[p], v) for p, v in optional if p in m):
            return orig
        return make(data)

    return pattern, rewrite


def _silu_rewriter() -> tuple[DFPattern, Callable]:
    x = wildcard()
    pattern = _mul(x, is_op("relax.sigmoid")(x))

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        return relax.op.nn.silu(m[x]) if _float_tensor(m[x]) else orig

    return pattern, rewrite


# -- normalizations --------------------------------------------------------------------------
def _last_axis_mean(call: relax.Expr) -> bool:
    """A ``mean`` over the last axis only, keeping it (so it broadcasts back over the row)."""
    if not isinstance(call, relax.Call) or not bool(call.attrs.keepdims) or call.attrs.axis is None:
        return False
    ndim = call.args[0].ty.ndim
    axes = [int(a) % ndim for a in call.attrs.axis]
    return axes == [ndim - 1]


def _epsilon(expr: relax.Expr) -> float | None:
    value = _scalar(expr)
    return value if value is not None and value > 0 and math.isfinite(value) else None


def _row_vector(expr: relax.Expr, data: relax.Expr) -> bool:
    """A float tensor of shape ``[D]`` for a ``data`` whose last axis has ``D`` elements (a
    per-feature scale or shift that broadcasts like the norm's parameters)."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.dtype != data.ty.dtype or ty.shape is None:
        return False
    dims = [int(d) for d in ty.shape.values if isinstance(d, tirx.IntImm)]
    last = data.ty.shape.values[-1]
    return len(dims) == len(ty.shape.values) and isinstance(last, tirx.IntImm) and \
        int(np.prod(dims)) == int(last) and all(d == 1 for d in dims[:-1])


def _reciprocal_sqrt(of: DFPattern, one: DFPattern) -> tuple[DFPattern, DFPattern]:
    """``(1/sqrt(of), sqrt(of))``: the two ways a normalizer is applied (multiply / divide)."""
    root = is_op("relax.sqrt")(of)
    return is_op("relax.divide")(one, root) | is_op("relax.rsqrt")(of), root


def _rms_norm_rewriter() -> tuple[DFPattern, Callable]:
    x, two, eps, one, weight = wildcard(), is_const(), is_const(), is_const(), wildcard()
    square = is_op("relax.power")(x, two) | _mul(x, x)
    mean = is_op("relax.mean")(square)
    inv, root = _reciprocal_sqrt(_add(mean, eps), one)
    normed = _mul(x, inv) | is_op("relax.divide")(x, root)
    pattern = _mul(weight, normed)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        data, w = m[x], m[weight]
        epsilon = _epsilon(m[eps])
        if epsilon is None or not _float_tensor(data) or not _same_shape(data, orig):
            return orig
        if not _last_axis_mean(m[mean]) or not _row_vector(w, data):
            return orig
        if two in m and not constant_matches(m[two], 2.0):
            return orig
        if one in m and not constant_matches(m[one], 1.0):
            return orig
        w = w if w.ty.ndim == 1 else relax.op.reshape(w, [int(data.ty.shape.values[-1])])
        return relax.op.nn.rms_norm(data, w, axes=[-1], epsilon=epsilon)

    return pattern, rewrite


def _layer_norm_rewriter() -> tuple[DFPattern, Callable]:
    x, two, eps, one, gamma, beta = (wildcard(), is_const(), is_const(), is_const(), wildcard(),
                                     wildcard())
    mean = is_op("relax.mean")(x)
    centered = is_op("relax.subtract")(x, mean)
    square = is_op("relax.power")(centered, two) | _mul(centered, centered)
    var = is_op("relax.mean")(square)
    inv, root = _reciprocal_sqrt(_add(var, eps), one)
    normed = is_op("relax.divide")(centered, root) | _mul(centered, inv)
    pattern = _add(_mul(normed, gamma), beta)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        data = m[x]
        epsilon = _epsilon(m[eps])
        if epsilon is None or not _float_tensor(data) or not _same_shape(data, orig):
            return orig
        if not (_last_axis_mean(m[mean]) and _last_axis_mean(m[var])):
            return orig
        if not (_row_vector(m[gamma], data) and _row_vector(m[beta], data)):
            return orig
        if two in m and not constant_matches(m[two], 2.0):
            return orig
        if one in m and not constant_matches(m[one], 1.0):
            return orig
        d = int(data.ty.shape.values[-1])
        g, b = (t if t.ty.ndim == 1 else relax.op.reshape(t, [d]) for t in (m[gamma], m[beta]))
        return relax.op.nn.layer_norm(data, g, b, axes=[-1], epsilon=epsilon)

    return pattern, rewrite


# -- the passes -------------------------------------------------------------------------------
def replacing_calls(replace: Callable[[relax.Call], "relax.Expr | None"]) -> Callable:
    """A ``rewrite_call`` callback from a function of one call: its replacement, or ``None``
    to keep the call (a match that is not a call is kept too)."""

    def rewrite(orig: relax.Expr, _: dict) -> relax.Expr:
        if not isinstance(orig, relax.Call):
            return orig
        out = replace(orig)
        return orig if out is None else out

    return rewrite


def rewrite_functions(mod: IRModule, rewriters: list[tuple[DFPattern, Callable]]) -> dict:
    """Every Relax function of ``mod`` with ``rewriters`` applied, where that changed it."""
    updates = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        new = func
        for pattern, rewrite in rewriters:
            new = rewrite_call(pattern, rewrite, new)
        if not new.same_as(func):
            updates[gvar] = new
    return updates


@tvm.transform.module_pass(opt_level=0, name="icca.RecognizeNorms")
class RecognizeNorms:
    """Rewrite RMS norm and layer norm written out over the last axis into their Relax ops.

    Run it after ``FoldConstant`` and before ``FuseOpsByPattern``.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        updates = rewrite_functions(mod, [_layer_norm_rewriter(), _rms_norm_rewriter()])
        for gvar, func in updates.items():
            mod[gvar] = func
        return mod

@tvm.transform.module_pass(opt_level=0, name="icca.RecognizeActivations")
class RecognizeActivations:
    """Rewrite written-out clip, GELU (erf and tanh forms) and SiLU into their Relax ops.

    Run it after ``FoldConstant`` (the importer computes Clip's bounds with ``where`` on
    constants) and before ``FuseOpsByPattern``. PrimFuncs no longer called are removed.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        rewriters = [_minmax_rewriter(mod), _clip_rewriter(), _gelu_rewriter(False),
                     _gelu_rewriter(True), _silu_rewriter()]
        updates = rewrite_functions(mod, rewriters)
        if not updates:
            return mod
        for gvar, func in updates.items():
            mod[gvar] = func
        return drop_unused_primfuncs(mod)


def drop_unused_primfuncs(mod: IRModule) -> IRModule:
    """Remove the private PrimFuncs that no function refers to any more."""
    used: set[str] = set()

    def note(gvar: tvm.ir.GlobalVar) -> None:
        used.add(gvar.name_hint)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            tvm_ffi.structural_walk(func, [(tvm.ir.GlobalVar, note)])
    for gvar, func in list(mod.functions_items()):
        exported = func.attrs is not None and "global_symbol" in func.attrs
        if isinstance(func, tirx.PrimFunc) and not exported and gvar.name_hint not in used:
            del mod[gvar]
    return mod
