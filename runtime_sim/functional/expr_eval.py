"""Evaluate expression trees with numpy, for every core at once.

This is the "compute" template of the functional device (T10 §4.4: *compute* emits the
per-core sub-task; §5: all cores run the same vertex on their own data in one step). A value
is an ndarray shaped ``[cores, *lengths]`` over a fixed axis order (the operator's top-level
axes, then its core-local axes), with size 1 wherever it does not depend on an axis, so that
numpy broadcasting lines values up without materializing them.

Arithmetic is done in float32 for float32 *and* float16 tensors. Two reasons: the IPU's AMP
unit multiplies half-precision operands but accumulates in single precision (T10 §5 runs
fp16 models on it), and numpy has no native half arithmetic (every fp16 operation would be
an emulated, slower, and *less* accurate than the hardware's fp32 accumulation). Partitions
are still stored in the tensor's declared dtype; the device rounds results back to it.
"""

from __future__ import annotations

import math
import string
from typing import Callable, Mapping, Sequence

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.expr import BINARY_OPS, NODE_COMBINERS, UNARY_OPS, Expr

#: dtype every value is computed in (see the module docstring for why not float16).
COMPUTE_DTYPE = np.float32

LoadFn = Callable[[Expr], np.ndarray]
AxisValueFn = Callable[[str], np.ndarray]
#: ``combine(node, partial)``: the value of a ``reduce`` node once the partial statistics of the
#: cores sharing its rows are combined (split core-local axes; identity otherwise)
CombineFn = Callable[[Expr, np.ndarray], np.ndarray]

_LETTERS = string.ascii_letters  # einsum subscripts: one per value dimension (cores first)


# -- erf without scipy ---------------------------------------------------------------------
_SERIES_TERMS = 60  # Maclaurin terms: 9**n / n! < 1e-17 for n >= 55, so |x| < 3 converges
_CF_TERMS = 60  # continued-fraction depth for erfc, ample for |x| >= 3


def erf(x: np.ndarray) -> np.ndarray:
    """The error function in float64, accurate to ~1e-13 (GELU needs it, scipy is not a dependency).

    ``|x| < 3``: the Maclaurin series ``2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))``;
    ``3 <= |x| < 6``: ``1 - erfc(x)`` with erfc's continued fraction (Abramowitz & Stegun
    7.1.14) evaluated bottom-up; beyond 6, erf is 1 to double precision.
    """
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    out = np.ones_like(ax)

    small = ax < 3.0
    if small.any():
        xs = ax[small]
        x2 = xs * xs
        term = xs.copy()  # (-1)^n x^(2n+1) / n!
        total = xs.copy()
        for n in range(1, _SERIES_TERMS):
            term = term * (-x2) / n
            total = total + term / (2 * n + 1)
        out[small] = total * (2.0 / math.sqrt(math.pi))

    mid = (ax >= 3.0) & (ax < 6.0)
    if mid.any():
        xm = ax[mid]
        # erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
        frac = xm.copy()
        for n in range(_CF_TERMS, 0, -1):
            frac = xm + (n / 2.0) / frac
        out[mid] = 1.0 - np.exp(-xm * xm) / (math.sqrt(math.pi) * frac)

    out[np.isnan(ax)] = np.nan
    return np.copysign(out, x)


# -- elementwise operators -----------------------------------------------------------------
def _f(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=COMPUTE_DTYPE)


def _truth(v: np.ndarray) -> np.ndarray:
    return v != 0


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda v: 1.0 / np.sqrt(v),
    "tanh": np.tanh,
    # 1/(1+e^-x) written as exp(-log(1+e^-x)) so large negative x does not overflow
    "sigmoid": lambda v: np.exp(-np.logaddexp(0.0, -v)),
    "erf": lambda v: erf(v),
    "abs": np.abs,
    "not": lambda v: ~_truth(v),
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,  # half to even, as TVM's round (nearbyint)
    "sin": np.sin,  # sinusoidal timestep and position embeddings (DiT, NeRF-style encodings)
    "cos": np.cos,
}

_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "and": lambda a, b: _truth(a) & _truth(b),
    "or": lambda a, b: _truth(a) | _truth(b),
}

assert set(_UNARY) == set(UNARY_OPS) and set(_BINARY) == set(BINARY_OPS)

_REDUCERS = {"sum": np.sum, "max": np.max, "min": np.min}
assert set(_REDUCERS) == set(NODE_COMBINERS)


class ExprEvaluator:
    """Evaluates expression trees over one chunk (or one output partition) on every core.

    ``axis_order`` and ``lengths`` fix the layout of values (``[cores, *lengths]``);
    ``load(node)`` returns the gathered operand of a ``load`` node in that layout (the device
    reads it from each core's own buffers); ``axis_value(name)`` returns the global index of
    an axis (for ``{"op": "axis"}`` nodes); ``result`` is the value of ``{"op": "result"}``
    in an epilogue; ``combine(node, partial)`` (optional) completes a reduction whose axes
    are split across cores (:meth:`runtime_sim.contract.layout.OpLayout.combine_groups`).
    """

    def __init__(
        self,
        axis_order: Sequence[str],
        lengths: Sequence[int],
        load: LoadFn,
        axis_value: AxisValueFn | None = None,
        result: np.ndarray | None = None,
        combine: CombineFn | None = None,
    ):
        if len(axis_order) != len(lengths):
            raise ValueError("axis_order and lengths differ in length")
        if len(axis_order) + 1 > len(_LETTERS):
            raise DeviceProgramError(f"too many axes ({len(axis_order)}) in one expression")
        self.axis_order = tuple(axis_order)
        self.lengths = tuple(int(n) for n in lengths)
        self._load = load
        self._axis_value = axis_value
        self._result = result
        self._combine = combine
        self._ndim = len(self.axis_order) + 1
        self._loads: dict[str, np.ndarray] = {}  # same load site read twice is gathered once

    # -- public -------------------------------------------------------------------------
    def evaluate(self, expr: Expr) -> np.ndarray:
        """Value of ``expr``: float32 (or bool for comparisons), ``[cores, *lengths]``-broadcastable."""
        with np.errstate(all="ignore"):  # IEEE semantics, as on the hardware: inf/nan, no warnings
            return self._eval(expr)

    def evaluate_sum(self, expr: Expr, axes: Sequence[str]) -> np.ndarray:
        """``sum(expr)`` over ``axes`` (kept as size-1 dimensions).

        A product of loads (matmul, convolution: T10 Eq. 1) is contracted with
        ``np.einsum(optimize=True)`` on the operands as gathered, never as the full
        broadcast product over every axis of the sub-task.
        """
        dims = [self._dim(a) for a in axes]
        with np.errstate(all="ignore"):
            factors = _mul_factors(expr)
            if len(factors) >= 2 and dims:
                values = [self._as_float(self._eval(f)) for f in factors]
                return self._einsum_sum(values, dims)
            return self._sum(self._as_float(self._eval(expr)), dims)

    def evaluate_reduce(self, expr: Expr, axes: Sequence[str], combiner: str) -> np.ndarray:
        """``combiner(expr)`` over ``axes`` (kept as size-1 dimensions): a top-level reduction."""
        if combiner == "sum":
            return self.evaluate_sum(expr, axes)
        if combiner not in _REDUCERS:
            raise DeviceProgramError(f"unknown reduce combiner '{combiner}'")
        dims = tuple(self._dim(a) for a in axes)
        with np.errstate(all="ignore"):  # a dimension the value does not vary on reduces to itself
            return _REDUCERS[combiner](self._as_float(self._eval(expr)), axis=dims, keepdims=True)

    def contract(self, values: Sequence[np.ndarray], axes: Sequence[str]) -> np.ndarray:
        """``sum(prod(values))`` over ``axes`` (kept as size-1 dimensions), contracted with
        ``np.einsum`` without materializing the broadcast product: attention's weighted sum
        of values, ``sum_j p[i, j] * v[j, d]``."""
        with np.errstate(all="ignore"):
            return self._einsum_sum([self._as_float(np.asarray(v)) for v in values],
                                    [self._dim(a) for a in axes])

    # -- evaluation ---------------------------------------------------------------------
    def _eval(self, node: Expr) -> np.ndarray:
        op = node.get("op")
        if op == "load":
            key = _load_key(node)
            if key not in self._loads:
                value = np.asarray(self._load(node))
                if value.ndim != self._ndim:
                    raise DeviceProgramError(
                        f"load of input {node.get('input')} gave {value.ndim} dims, expected {self._ndim}"
                    )
                self._loads[key] = _f(value)
            return self._loads[key]
        if op == "const":
            return np.full([1] * self._ndim, node["value"], dtype=COMPUTE_DTYPE)
        if op == "axis":
            if self._axis_value is None:
                raise DeviceProgramError("this expression cannot read axis values")
            return _f(self._axis_value(node["axis"]))
        if op == "result":
            if self._result is None:
                raise DeviceProgramError("{'op': 'result'} is only valid in an epilogue")
            return _f(self._result)
        args = node.get("args", ())
        if op in _UNARY:
            return self._arith(_UNARY[op](self._as_float(self._eval(args[0]))))
        if op in _BINARY:
            a, b = (self._as_float(self._eval(x)) for x in args)
            return self._arith(_BINARY[op](a, b))
        if op == "select":
            cond, a, b = (self._eval(x) for x in args)
            return np.where(_truth(cond), self._as_float(a), self._as_float(b))
        if op == "cast":
            return _cast(self._eval(args[0]), str(node["dtype"]))
        if op == "reduce":
            combiner = node.get("combiner", "sum")
            if combiner not in _REDUCERS:
                raise DeviceProgramError(f"unknown reduce combiner '{combiner}'")
            dims = [self._dim(a) for a in node["axes"]]
            if combiner == "sum":
                factors = _mul_factors(args[0])
                if len(factors) >= 2:  # contract, do not materialize the product
                    value = self._einsum_sum([self._as_float(self._eval(f)) for f in factors], dims)
                else:
                    value = self._sum(self._as_float(self._eval(args[0])), dims)
            else:
                value = _REDUCERS[combiner](self._as_float(self._eval(args[0])), axis=tuple(dims),
                                            keepdims=True)
            return value if self._combine is None else self._combine(node, value)
        raise DeviceProgramError(f"unknown expression op '{op}'")

    def _dim(self, axis: str) -> int:
        try:
            return self.axis_order.index(axis) + 1
        except ValueError:
            raise DeviceProgramError(f"expression uses unknown axis '{axis}'") from None

    @staticmethod
    def _as_float(v: np.ndarray) -> np.ndarray:
        return v.astype(COMPUTE_DTYPE) if v.dtype != COMPUTE_DTYPE else v

    @staticmethod
    def _arith(v: np.ndarray) -> np.ndarray:
        # comparisons and logic stay bool (select reads them); arithmetic is float32
        return v if v.dtype == np.bool_ else _f(v)

    def _sum(self, value: np.ndarray, dims: Sequence[int]) -> np.ndarray:
        # a summand that does not depend on an axis is counted once per position of it
        scale = 1
        for d in dims:
            if value.shape[d] == 1:
                scale *= self.lengths[d - 1]
        out = np.sum(value, axis=tuple(dims), keepdims=True, dtype=COMPUTE_DTYPE)
        return out * COMPUTE_DTYPE(scale) if scale != 1 else out

    def _einsum_sum(self, values: list[np.ndarray], dims: Sequence[int]) -> np.ndarray:
        full = [max(v.shape[d] for v in values) for d in range(self._ndim)]
        operands, subscripts = [], []
        for v in values:
            keep = [d for d in range(self._ndim) if v.shape[d] > 1]
            operands.append(v.reshape([v.shape[d] for d in keep]))
            subscripts.append("".join(_LETTERS[d] for d in keep))
        summed = set(dims)
        out_dims = [d for d in range(self._ndim) if d not in summed and full[d] > 1]
        spec = ",".join(subscripts) + "->" + "".join(_LETTERS[d] for d in out_dims)
        out = np.einsum(spec, *operands, optimize=True)
        out = np.asarray(out, dtype=COMPUTE_DTYPE).reshape(
            [full[d] if d in out_dims else 1 for d in range(self._ndim)]
        )
        scale = 1
        for d in summed:
            if full[d] == 1:
                scale *= self.lengths[d - 1]
        return out * COMPUTE_DTYPE(scale) if scale != 1 else out


def _mul_factors(node: Expr) -> list[Expr]:
    """Operands of a (nested) product, or ``[node]`` when it is not a product."""
    if node.get("op") != "mul":
        return [node]
    out: list[Expr] = []
    for arg in node["args"]:
        out.extend(_mul_factors(arg))
    return out


def _load_key(node: Expr) -> str:
    terms = [
        (tuple((str(a), int(c)) for a, c in i.get("terms", ())), int(i.get("offset", 0)))
        for i in node["index"]
    ]
    return repr((int(node["input"]), terms))


def _cast(value: np.ndarray, dtype: str) -> np.ndarray:
    """Round ``value`` to ``dtype`` and carry it on in the compute dtype."""
    if dtype == "bool":
        return _truth(value)
    if dtype in ("float32", "float64"):  # float64 casts keep the float32 value we have
        return _f(value)
    try:
        target = np.dtype(dtype)
    except TypeError:
        raise DeviceProgramError(f"cannot cast to unknown dtype '{dtype}'") from None
    with np.errstate(all="ignore"):
        return _f(np.asarray(value).astype(target))


def evaluate(
    expr: Expr,
    axis_order: Sequence[str],
    lengths: Sequence[int],
    load: LoadFn,
    axis_values: Mapping[str, np.ndarray] | None = None,
    result: np.ndarray | None = None,
) -> np.ndarray:
    """One-shot :meth:`ExprEvaluator.evaluate`; ``axis_values`` maps axis name to its index array."""
    values = dict(axis_values or {})
    return ExprEvaluator(axis_order, lengths, load, values.__getitem__, result).evaluate(expr)
