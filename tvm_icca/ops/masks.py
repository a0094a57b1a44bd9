"""Causal and banded attention masks as a predicate on the axis values, not an ``[S, S]`` tensor.

An LLM's prefill adds a mask ``M`` to the attention scores before the softmax: 0 where query
``i`` sees key ``j`` (``j <= i``, and inside the window of Gemma 2's local layers), a large
negative number ``fill`` elsewhere. Passed as a tensor, ``M`` is an extra input of the fused
attention whose blocks rotate with the keys and take SRAM; yet it is a function of ``j - i``
only. This module recognizes such a mask and writes it as the predicate the fused attention
evaluates on the axis values (:mod:`tvm_icca.lower.te_attention`)::

    score = select(cond, fill, score_without_mask)
    cond  = gt(j, i + upper)  [or  lt(j, i + lower)]      (true: masked)

Everything here describes a mask by one :class:`BandMask` (``masked iff j - i > upper or
j - i < lower``), whatever form it came in:

* a ``relax.Constant`` (an ONNX initializer, or a chain TVM's ``FoldConstant`` folded), read
  by value (:func:`band_of_array`);
* a chain of shape-only Relax ops (``arange``, comparisons, ``where``, ``triu``/``tril``,
  ``full``, ``broadcast_to``, ``reshape``, ... as Hugging Face and the dynamo exporter build
  it), read symbolically (:func:`band_of_relax`), so that a 32K-token mask is never computed;
* the predicate of a lowered expression (:func:`band_of_predicate`).

Symbolically, every value of the chain is an affine function of the row ``i`` and column
``j`` of the mask, a boolean formula of comparisons of such functions, a select, or
arithmetic on these; a mask is banded when every comparison and value reads ``j - i`` only,
and it is then evaluated on the ``rows + keys - 1`` possible offsets ``d = j - i``, never on
the ``rows x keys`` grid.

:func:`tvm_icca.ops.mask_predicates.MasksAsPredicates` rewrites ``softmax(S + M)`` into
``softmax(where(cond, fill, S))`` with ``cond`` on the axis values; the lowering then writes
``cond`` in the canonical form (:func:`canonical_mask`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import tvm
from tvm import relax

from tvm_icca.ops.relax_types import static_shape

__all__ = ["BandMask", "band_of_array", "band_of_predicate", "band_of_relax", "canonical_mask",
           "large_negative", "predicate_expr"]


@dataclass(frozen=True)
class BandMask:
    """A ``rows x keys`` additive mask: ``fill`` where ``j - i > upper`` or ``j - i < lower``
    (a bound of ``None`` masks nothing), 0 elsewhere. Causal: ``upper = keys - rows``;
    a sliding window of ``w`` tokens adds ``lower = keys - rows - w + 1``."""

    rows: int
    keys: int
    upper: int | None
    lower: int | None
    fill: float

    def masked(self) -> np.ndarray:
        """The ``rows x keys`` boolean grid (for tests and small masks)."""
        d = np.arange(self.keys)[None, :] - np.arange(self.rows)[:, None]
        return self.masked_offsets(d)

    def masked_offsets(self, d: np.ndarray) -> np.ndarray:
        out = np.zeros(np.shape(d), bool)
        if self.upper is not None:
            out |= d > self.upper
        if self.lower is not None:
            out |= d < self.lower
        return out

    def every_row_sees_a_key(self) -> bool:
        """Whether each query row has a visible key: then ``exp`` of every masked score is
        exactly 0 after the row's maximum is subtracted, whether the mask added ``fill`` or
        replaced the score by it (see :func:`MasksAsPredicates`)."""
        i = np.arange(self.rows)
        first = np.maximum(0, i + (self.lower if self.lower is not None else -self.rows))
        last = np.minimum(self.keys - 1, i + (self.upper if self.upper is not None else self.keys))
        return bool(np.all(first <= last))


def large_negative(fill: float, dtype: str) -> bool:
    """``fill`` is ``-inf`` or at most half the dtype's lowest value (what exporters and the
    zoo write): a score plus ``fill`` then underflows ``exp`` to 0 like ``fill`` itself."""
    if math.isinf(fill):
        return fill < 0
    try:
        lowest = float(np.finfo(np.dtype(dtype)).min)
    except TypeError:
        return False
    return fill <= lowest / 2


def _band_of_offsets(masked: np.ndarray, offsets: np.ndarray, rows: int, keys: int,
                     fill: float) -> BandMask | None:
    """The band whose masked offsets ``d = j - i`` (``offsets``, every possible one) are
    ``masked``; ``None`` when they are not ``d > upper or d < lower`` or mask nothing."""
    visible = offsets[~masked]
    if visible.size == 0 or not masked.any():
        return None
    lo, hi = int(visible.min()), int(visible.max())
    band = BandMask(rows, keys, hi if hi < keys - 1 else None, lo if lo > 1 - rows else None, fill)
    if not np.array_equal(band.masked_offsets(offsets), masked):
        return None  # a hole inside the band: not one interval of offsets
    return band


def band_of_array(mask: np.ndarray) -> BandMask | None:
    """The band mask ``mask`` holds by value, or ``None``.

    ``mask`` is ``[1, .., 1, rows, keys]``: exactly 0 where visible and one value ``fill`` (a
    large negative number: ``-inf`` or at most half the dtype's lowest) where masked, the
    masked entries of each row ``i`` being those with ``j - i`` above an upper or below a
    lower bound, the same bounds for every row. Every row must see a key.
    """
    if mask.ndim < 2 or any(n != 1 for n in mask.shape[:-2]):
        return None
    if mask.dtype.kind != "f":
        return None
    rows, keys = mask.shape[-2:]
    grid = mask.reshape(rows, keys)
    nonzero = grid != 0
    if not nonzero.any():
        return None
    fill = float(grid[nonzero][0])
    if not large_negative(fill, str(mask.dtype)) or not np.all(grid[nonzero] == grid[nonzero][0]):
        return None
    visible = ~nonzero
    counts = visible.sum(axis=1)
    if np.any(counts == 0):
        return None
    i = np.arange(rows)
    first = np.argmax(visible, axis=1)
    last = keys - 1 - np.argmax(visible[:, ::-1], axis=1)
    if np.any(last - first + 1 != counts):
        return None  # a row's visible keys are not contiguous
    upper, lower = int(np.max(last - i)), int(np.min(first - i))
    band = BandMask(rows, keys, upper if upper < keys - 1 else None,
                    lower if lower > 1 - rows else None, fill)
    want_first = np.maximum(0, i + (band.lower if band.lower is not None else -rows))
    want_last = np.minimum(keys - 1, i + (band.upper if band.upper is not None else keys))
    if not (np.array_equal(first, want_first) and np.array_equal(last, want_last)):
        return None
    return band if band.every_row_sees_a_key() else None


#: The value of a constant input of an expression, by input number (``None``: not constant).
ConstantOf = Callable[[int], "np.ndarray | None"]


# -- the symbolic values of a mask computation ----------------------------------------------
@dataclass(frozen=True)
class _Lin:
    """``ci * i + cj * j + c`` (``i``, ``j``: the row and column of the mask)."""

    ci: float
    cj: float
    c: float

    def __add__(self, o: "_Lin") -> "_Lin":
        return _Lin(self.ci + o.ci, self.cj + o.cj, self.c + o.c)

    def scaled(self, k: float) -> "_Lin":
        return _Lin(self.ci * k, self.cj * k, self.c * k)

    @property
    def constant(self) -> float | None:
        return self.c if self.ci == 0 and self.cj == 0 else None


#: comparisons ``a op b`` -> numpy ufunc
_COMPARE: dict[str, Callable] = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less,
                                 "le": np.less_equal, "eq": np.equal, "ne": np.not_equal}


@dataclass(frozen=True)
class _Cond:
    """A boolean formula: ``("cmp", op, lin)`` (``lin op 0``), ``("or"|"and", a, b)``,
    ``("not", a)`` or ``("const", bool)``."""

    node: tuple

    def on_offsets(self, d: np.ndarray) -> np.ndarray | None:
        """The formula at ``j - i = d``; ``None`` when a comparison reads more than ``j - i``."""
        kind = self.node[0]
        if kind == "const":
            return np.full(d.shape, bool(self.node[1]))
        if kind == "cmp":
            _, op, lin = self.node
            if lin.ci != -lin.cj:
                return None
            return _COMPARE[op](lin.cj * d + lin.c, 0)
        if kind == "not":
            inner = self.node[1].on_offsets(d)
            return None if inner is None else ~inner
        a, b = self.node[1].on_offsets(d), self.node[2].on_offsets(d)
        if a is None or b is None:
            return None
        return (a | b) if kind == "or" else (a & b)


@dataclass(frozen=True)
class _Sel:
    """``cond ? then : other``."""

    cond: _Cond
    then: Any
    other: Any


@dataclass(frozen=True)
class _Arith:
    """``a op b`` (``op``: add, subtract, multiply) of values not both affine."""

    op: str
    a: Any
    b: Any


_ARITH: dict[str, Callable] = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}


def _on_offsets(value: Any, d: np.ndarray) -> np.ndarray | None:
    """A numeric ``value`` at ``j - i = d``; ``None`` when it reads more than ``j - i``."""
    if isinstance(value, (int, float)):
        return np.full(d.shape, float(value))
    if isinstance(value, _Lin):
        return None if value.ci != -value.cj else value.cj * d + value.c
    if isinstance(value, _Sel):
        parts = [value.cond.on_offsets(d), _on_offsets(value.then, d), _on_offsets(value.other, d)]
        return None if any(p is None for p in parts) else np.where(*parts)
    if isinstance(value, _Arith):
        a, b = _on_offsets(value.a, d), _on_offsets(value.b, d)
        return None if a is None or b is None else _ARITH[value.op](a, b)
    return None


def _band_of_value(value: Any, rows: int, keys: int, dtype: str | None = None
                   ) -> BandMask | None:
    """The band of a symbolic mask ``value``: 0 on a band of offsets ``j - i``, one ``fill``
    elsewhere (computed in ``dtype`` when given)."""
    d = np.arange(1 - rows, keys)
    with np.errstate(all="ignore"):
        values = _on_offsets(value, d)
    if values is None:
        return None
    if dtype is not None:
        values = values.astype(dtype)
    masked = values != 0
    if not masked.any():
        return None
    fills = values[masked]
    fill = float(fills[0])
    if not np.all(fills == fills[0]):
        return None
    band = _band_of_offsets(masked, d, rows, keys, fill)
    return band if band is not None and band.every_row_sees_a_key() else None


# -- reading a Relax chain ---------------------------------------------------------------------
class _Unknown(Exception):
    """The chain computes something this reader does not follow."""


def _shape(expr: relax.Expr) -> tuple[int, ...]:
    shape = static_shape(expr.ty)
    if shape is None:
        raise _Unknown("not a static shape")
    return shape


def _scalar(arg: Any) -> float:
    """A constant scalar argument (an ``IntImm``/``FloatImm``, maybe in a ``PrimValue``)."""
    for _ in range(2):
        if isinstance(arg, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
            return float(arg.value)
        arg = getattr(arg, "value", None)
    raise _Unknown("not a constant scalar")


class _ChainReader:
    """Reads a chain of shape-only Relax ops as a symbolic value over the mask's ``(i, j)``.

    Values are broadcast like numpy: a tensor's axis ``-2`` is the row ``i`` and ``-1`` the
    column ``j`` of the ``rows x keys`` mask; an axis of extent 1 reads neither. Leading axes
    must have extent 1.
    """

    def __init__(self, bound: Mapping[relax.Var, relax.Expr], rows: int, keys: int) -> None:
        self.bound, self.rows, self.keys = bound, rows, keys

    def read(self, expr: relax.Expr) -> Any:
        if isinstance(expr, relax.Var):
            if expr not in self.bound:
                raise _Unknown("the mask reads an input")
            return self.read(self.bound[expr])
        if isinstance(expr, tvm.ir.GenericConst):
            return self._constant(expr.value.numpy())
        if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op):
            raise _Unknown(type(expr).__name__)
        name = expr.op.name.removeprefix("relax.")
        shape = _shape(expr)
        if len(shape) > 2 and any(n != 1 for n in shape[:-2]):
            raise _Unknown("a leading axis is not of extent 1")
        method = getattr(self, f"_op_{name}", None)
        if method is None:
            raise _Unknown(f"{name} is not a shape-only mask op")
        return method(expr, shape)

    # leaves
    def _constant(self, array: np.ndarray) -> Any:
        if array.size == 1:
            value = array.reshape(()).item()
            return _Cond(("const", bool(value))) if array.dtype == bool else _Lin(0, 0, float(value))
        shape = array.shape
        if any(n != 1 for n in shape[:-2]) or array.dtype.kind not in "iuf":
            raise _Unknown("a constant tensor")
        axes = [a for a in (-2, -1) if len(shape) >= -a and shape[a] != 1]
        if len(axes) != 1:
            raise _Unknown("a constant that is not a vector")
        found = _range_of(array)
        if found is None:
            raise _Unknown("a constant vector that is not a range")
        return self._along(axes[0], *found)

    def _along(self, axis: int, start: float, step: float) -> _Lin:
        return _Lin(step, 0, start) if axis == -2 else _Lin(0, step, start)

    def _op_arange(self, call: relax.Call, shape: tuple[int, ...]) -> _Lin:
        start, _, step = (_scalar(a) for a in call.args)
        return self._along(-1, start, step)

    def _moved(self, value: Any, src: tuple[int, ...], dst: tuple[int, ...]) -> Any:
        """``value`` of shape ``src`` viewed as ``dst`` when only axes of extent 1 change."""
        src_axes = [len(src) - k for k in range(len(src)) if src[k] != 1]
        dst_axes = [len(dst) - k for k in range(len(dst)) if dst[k] != 1]
        if [src[-a] for a in src_axes] != [dst[-a] for a in dst_axes]:
            raise _Unknown("a reshape that is not a view of the same axes")
        mapping = {-a: -b for a, b in zip(src_axes, dst_axes)}  # axis from the right
        if any(b not in (-1, -2) for b in mapping.values()):
            raise _Unknown("a mask axis leaves the last two")
        return self._remap(value, mapping)

    def _remap(self, value: Any, mapping: dict[int, int]) -> Any:
        if isinstance(value, _Lin):
            coef = {-2: value.ci, -1: value.cj}
            new = {-2: 0.0, -1: 0.0}
            for src, c in coef.items():
                if c:
                    if src not in mapping:
                        raise _Unknown("an axis read by a value disappears")
                    new[mapping[src]] += c
            return _Lin(new[-2], new[-1], value.c)
        if isinstance(value, _Cond):
            node = value.node
            if node[0] == "cmp":
                return _Cond(("cmp", node[1], self._remap(node[2], mapping)))
            if node[0] == "const":
                return value
            return _Cond((node[0], *(self._remap(n, mapping) for n in node[1:])))
        if isinstance(value, _Sel):
            return _Sel(self._remap(value.cond, mapping), self._remap(value.then, mapping),
                        self._remap(value.other, mapping))
        if isinstance(value, _Arith):
            return _Arith(value.op, self._remap(value.a, mapping), self._remap(value.b, mapping))
        return value

    def _view(self, call: relax.Call, shape: tuple[int, ...]) -> Any:
        return self._moved(self.read(call.args[0]), _shape(call.args[0]), shape)

    _op_reshape = _op_expand_dims = _op_squeeze = _view

    def _op_broadcast_to(self, call: relax.Call, shape: tuple[int, ...]) -> Any:
        src = _shape(call.args[0])
        padded = (1,) * (len(shape) - len(src)) + src
        if any(a != b and a != 1 for a, b in zip(padded, shape)):
            raise _Unknown("broadcast_to changes an axis")
        return self.read(call.args[0])  # a broadcast axis reads nothing new

    def _op_permute_dims(self, call: relax.Call, shape: tuple[int, ...]) -> Any:
        n = len(shape)
        axes = list(range(n)) if call.attrs.axes is None else [int(a) for a in call.attrs.axes]
        if axes[:-2] != list(range(n - 2)):
            raise _Unknown("a transpose of leading axes")
        if axes[-2:] == [n - 2, n - 1]:
            return self.read(call.args[0])
        return self._remap(self.read(call.args[0]), {-2: -1, -1: -2})

    def _op_astype(self, call: relax.Call, shape: tuple[int, ...]) -> Any:
        value = self.read(call.args[0])
        dtype = str(call.attrs.dtype)
        if isinstance(value, _Cond):
            return _Sel(value, 1.0, 0.0) if dtype != "bool" else value
        if dtype == "bool":
            if not isinstance(value, _Lin):
                raise _Unknown("a select cast to bool")
            return _Cond(("cmp", "ne", value))
        if isinstance(value, _Lin) and dtype.startswith(("int", "uint")):
            if any(c != math.floor(c) for c in (value.ci, value.cj, value.c)):
                raise _Unknown("a fractional value cast to an integer")
        return value

    def _arith(self, call: relax.Call, op: str) -> Any:
        a, b = self.read(call.args[0]), self.read(call.args[1])
        if isinstance(a, _Lin) and isinstance(b, _Lin):
            if op == "add":
                return a + b
            if op == "subtract":
                return a + b.scaled(-1)
            k, other = (a.constant, b) if a.constant is not None else (b.constant, a)
            if k is not None:
                return other.scaled(k)
        if isinstance(a, _Cond) or isinstance(b, _Cond):
            raise _Unknown(f"{op} of a bool")
        return _Arith(op, a, b)

    def _op_add(self, call, shape):
        return self._arith(call, "add")

    def _op_subtract(self, call, shape):
        return self._arith(call, "subtract")

    def _op_multiply(self, call, shape):
        return self._arith(call, "multiply")

    def _compare(self, call: relax.Call, op: str) -> _Cond:
        a, b = self.read(call.args[0]), self.read(call.args[1])
        if not (isinstance(a, _Lin) and isinstance(b, _Lin)):
            raise _Unknown("a comparison of non-affine values")
        return _Cond(("cmp", op, a + b.scaled(-1)))

    def _op_greater(self, call, shape):
        return self._compare(call, "gt")

    def _op_greater_equal(self, call, shape):
        return self._compare(call, "ge")

    def _op_less(self, call, shape):
        return self._compare(call, "lt")

    def _op_less_equal(self, call, shape):
        return self._compare(call, "le")

    def _op_equal(self, call, shape):
        return self._compare(call, "eq")

    def _op_not_equal(self, call, shape):
        return self._compare(call, "ne")

    def _logical(self, call: relax.Call, op: str) -> _Cond:
        values = [self.read(a) for a in call.args]
        if not all(isinstance(v, _Cond) for v in values):
            raise _Unknown(f"logical {op} of non-bool values")
        return _Cond((op, *values))

    def _op_logical_or(self, call, shape):
        return self._logical(call, "or")

    def _op_logical_and(self, call, shape):
        return self._logical(call, "and")

    def _op_logical_not(self, call, shape):
        return self._logical(call, "not")

    def _op_where(self, call: relax.Call, shape: tuple[int, ...]) -> _Sel:
        cond, then, other = (self.read(a) for a in call.args)
        if not isinstance(cond, _Cond) or isinstance(then, _Cond) or isinstance(other, _Cond):
            raise _Unknown("where on a non-bool condition or between bools")
        return _Sel(cond, then, other)

    def _fill(self, call: relax.Call, value: float) -> _Lin:
        return _Lin(0, 0, value)

    def _op_zeros(self, call, shape):
        return self._fill(call, 0.0)

    def _op_ones(self, call, shape):
        return self._fill(call, 1.0)

    def _op_full(self, call, shape):
        value = self.read(call.args[1])
        if not isinstance(value, _Lin) or value.constant is None:
            raise _Unknown("full of a non-constant")
        return value

    def _triangle(self, call: relax.Call, upper: bool) -> _Sel:
        value = self.read(call.args[0])
        if isinstance(value, _Cond):
            raise _Unknown("triu/tril of a bool")
        k = int(_scalar(call.args[1]) if len(call.args) > 1 else call.attrs.k)
        # triu keeps j - i >= k, tril keeps j - i <= k
        keep = _Cond(("cmp", "ge" if upper else "le", _Lin(-1, 1, -k)))
        return _Sel(keep, value, 0.0)

    def _op_triu(self, call, shape):
        return self._triangle(call, True)

    def _op_tril(self, call, shape):
        return self._triangle(call, False)


def band_of_relax(mask: relax.Expr, bound: Mapping[relax.Var, relax.Expr], rows: int,
                  keys: int) -> BandMask | None:
    """The band mask ``mask`` computes, or ``None``: a constant read by value
    (:func:`band_of_array`), a variable whose computation (``bound``: variable -> value) uses
    only shape-only ops and constants, read symbolically."""
    value = bound.get(mask, mask) if isinstance(mask, relax.Var) else mask
    if isinstance(value, tvm.ir.GenericConst):
        band = band_of_array(value.value.numpy())
        return band if band is not None and (band.rows, band.keys) == (rows, keys) else None
    try:
        symbolic = _ChainReader(bound, rows, keys).read(mask)
    except _Unknown:
        return None
    band = _band_of_value(symbolic, rows, keys, str(mask.ty.dtype))
    if band is None or not large_negative(band.fill, str(mask.ty.dtype)):
        return None
    return band

# -- the predicate in a lowered expression ------------------------------------------------------
def predicate_expr(band: BandMask, i: str = "i", j: str = "j") -> dict:
    """``cond`` of ``select(cond, fill, score)`` for ``band`` (true: masked), the canonical
    form: ``gt(j, i + upper)``, ``lt(j, i + lower)``, or both joined by ``or``."""
    def bound(op: str, offset: int) -> dict:
        return {"op": op, "args": [{"op": "axis", "axis": j}, {"op": "add", "args": [
            {"op": "axis", "axis": i}, {"op": "const", "value": offset}]}]}

    parts = ([bound("gt", band.upper)] if band.upper is not None else []) + (
        [bound("lt", band.lower)] if band.lower is not None else [])
    if not parts:
        raise ValueError("a band mask that masks nothing has no predicate")
    return parts[0] if len(parts) == 1 else {"op": "or", "args": parts}


def _range_of(array: np.ndarray) -> tuple[float, float] | None:
    """``(start, step)`` when ``array`` (of one axis of extent > 1) is an arithmetic range."""
    values = array.reshape(-1).astype(np.float64)
    step = values[1] - values[0] if values.size > 1 else 0.0
    if not np.array_equal(values, values[0] + step * np.arange(values.size)):
        return None
    return float(values[0]), float(step)


def _expr_value(node: Mapping[str, Any], i: str, j: str, constant_of: ConstantOf) -> Any:
    op = node.get("op")
    if op == "load":
        # an integer range read along an axis: what TVM legalizes arange to
        array = constant_of(node["input"])
        if array is None:
            raise _Unknown("the predicate reads a tensor")
        dims = [(n, idx) for n, idx in zip(array.shape, node["index"]) if n != 1]
        if len(dims) != 1 or len(dims[0][1]["terms"]) != 1:
            raise _Unknown("the predicate reads a constant that is not a vector")
        (axis, coef), offset = dims[0][1]["terms"][0], dims[0][1]["offset"]
        found = _range_of(array)
        if found is None or coef != 1 or axis not in (i, j):
            raise _Unknown("the predicate reads a constant that is not a range")
        start, step = found
        at = _Lin(1, 0, 0) if axis == i else _Lin(0, 1, 0)
        return (at + _Lin(0, 0, offset)).scaled(step) + _Lin(0, 0, start)
    if op == "axis":
        if node["axis"] not in (i, j):
            raise _Unknown(f"the predicate reads axis {node['axis']}")
        return _Lin(1, 0, 0) if node["axis"] == i else _Lin(0, 1, 0)
    if op == "const":
        value = node["value"]
        return _Cond(("const", value)) if isinstance(value, bool) else _Lin(0, 0, float(value))
    if op == "cast":
        inner = _expr_value(node["args"][0], i, j, constant_of)
        if isinstance(inner, _Cond) and node["dtype"] != "bool":
            return _Sel(inner, 1.0, 0.0)  # a bool as a number (the legalized where reads it so)
        return inner
    args = [_expr_value(a, i, j, constant_of) for a in node.get("args", ())]
    if op in _COMPARE and len(args) == 2 and isinstance(args[0], _Sel) \
            and isinstance(args[1], _Lin) and args[1].constant is not None:
        sel, c = args[0], args[1].constant
        then, other = bool(_COMPARE[op](sel.then, c)), bool(_COMPARE[op](sel.other, c))
        if then == other:
            return _Cond(("const", then))
        return sel.cond if then else _Cond(("not", sel.cond))
    if op in ("add", "sub", "mul") and all(isinstance(a, _Lin) for a in args):
        a, b = args
        if op == "add":
            return a + b
        if op == "sub":
            return a + b.scaled(-1)
        if a.constant is not None:
            return b.scaled(a.constant)
        if b.constant is not None:
            return a.scaled(b.constant)
    if op in _COMPARE and all(isinstance(a, _Lin) for a in args):
        return _Cond(("cmp", op, args[0] + args[1].scaled(-1)))
    if op in ("and", "or", "not") and all(isinstance(a, _Cond) for a in args):
        return _Cond((op, *args))
    raise _Unknown(f"'{op}' in a mask predicate")


def band_of_predicate(cond: Mapping[str, Any], rows: int, keys: int,
                      constant_of: ConstantOf = lambda _: None, i: str = "i",
                      j: str = "j", unmasked: bool = False) -> BandMask | None:
    """The band of the condition ``cond`` (true: masked) of a lowered expression over query
    rows ``i`` and keys ``j``, or ``None`` when it is not a predicate on ``j - i`` of a band
    every row of which sees a key. ``constant_of(input)`` is the value of a constant input
    (TVM legalizes ``arange`` to one), ``None`` for others. The band's ``fill`` is ``-inf``
    (the predicate does not say it). With ``unmasked``, a predicate on ``j - i`` that is
    false on every pair gives the band that masks nothing (both bounds ``None``) rather than
    ``None``: a piece of a masked operator whose rows see every key
    (:mod:`tvm_icca.split.visible_keys`)."""
    try:
        value = _expr_value(cond, i, j, constant_of)
    except _Unknown:
        return None
    if not isinstance(value, _Cond):
        return None
    band = _band_of_value(_Sel(value, -math.inf, 0.0), rows, keys)
    if band is None and unmasked:
        hit = value.on_offsets(np.arange(1 - rows, keys))
        if hit is not None and not np.asarray(hit, bool).any():
            return BandMask(rows, keys, None, None, -math.inf)
    return band


def canonical_mask(score: Mapping[str, Any], rows: int, keys: int,
                   constant_of: ConstantOf = lambda _: None) -> dict | None:
    """``score`` with a band mask in the canonical form, or ``None`` when it has none.

    A band mask is ``select(cond, fill, s)`` (maybe under casts, which move inside: a cast
    of a select is the select of the casts) whose ``cond`` is a band predicate
    (:func:`band_of_predicate`); it becomes ``select(predicate_expr(band), fill, s)``,
    ``cond`` in the form the fused attention's consumers read.
    """
    casts = []
    node = dict(score)
    while node.get("op") == "cast":
        casts.append(node["dtype"])
        node = node["args"][0]
    if node.get("op") != "select":
        return None
    cond, fill, rest = node["args"]
    band = band_of_predicate(cond, rows, keys, constant_of)
    if band is None:
        return None
    for dtype in reversed(casts):
        fill = {"op": "cast", "dtype": dtype, "args": [fill]}
        rest = {"op": "cast", "dtype": dtype, "args": [rest]}
    return {"op": "select", "args": [predicate_expr(band), fill, rest]}
