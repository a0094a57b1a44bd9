"""The per-core expression evaluator (runtime_sim.functional.expr_eval), against numpy."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.expr import BINARY_OPS, UNARY_OPS
from runtime_sim.functional import expr_eval
from runtime_sim.functional.expr_eval import ExprEvaluator, erf, evaluate

RNG = np.random.default_rng(0)
CORES, I, J, K = 3, 4, 5, 6
ORDER = ("i", "j", "k")
LENGTHS = (I, J, K)
X = RNG.standard_normal((CORES, I, J, 1)).astype(np.float32)  # depends on i, j
Y = RNG.standard_normal((CORES, 1, J, K)).astype(np.float32)  # depends on j, k


def load(i: int) -> dict:
    return {"op": "load", "input": i, "index": []}


def loader(node: dict) -> np.ndarray:
    return [X, Y][node["input"]]


def ev(expr: dict, **kw) -> np.ndarray:
    return evaluate(expr, ORDER, LENGTHS, loader, **kw)


@settings(max_examples=200, deadline=None)
@given(st.floats(-8, 8, allow_nan=False))
def test_erf_matches_math(x: float) -> None:
    assert erf(np.array([x]))[0] == pytest.approx(math.erf(x), rel=1e-10, abs=1e-15)


def test_erf_edges() -> None:
    x = np.array([0.0, -0.0, 1e-8, 2.999999, 3.0, 5.99, 6.0, 40.0, -40.0, np.inf, -np.inf])
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(erf(x), want, rtol=1e-12, atol=1e-300)
    assert np.isnan(erf(np.array([np.nan]))[0])


_NP_UNARY = {
    "neg": np.negative, "exp": np.exp, "log": lambda v: np.log(np.abs(v)), "sqrt": lambda v: np.sqrt(np.abs(v)),
    "rsqrt": lambda v: 1 / np.sqrt(np.abs(v)), "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "erf": lambda v: np.vectorize(math.erf)(v), "abs": np.abs, "not": lambda v: (v == 0).astype(np.float32),
    "floor": np.floor, "ceil": np.ceil, "round": np.round,
    "sin": lambda v: np.vectorize(math.sin)(v), "cos": lambda v: np.vectorize(math.cos)(v),
}


@pytest.mark.parametrize("name", UNARY_OPS)
def test_unary(name: str) -> None:
    arg = load(0)
    if name in ("log", "sqrt", "rsqrt"):  # keep the reference real
        arg = {"op": "abs", "args": [arg]}
    got = ev({"op": name, "args": [arg]}).astype(np.float64)
    np.testing.assert_allclose(got, _NP_UNARY[name](X.astype(np.float64)), rtol=1e-5, atol=1e-6)


_NP_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
    "min": np.minimum, "pow": lambda a, b: np.power(np.abs(a), b), "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "and": lambda a, b: (a != 0) & (b != 0), "or": lambda a, b: (a != 0) | (b != 0),
}


@pytest.mark.parametrize("name", BINARY_OPS)
def test_binary_broadcasts(name: str) -> None:
    a = {"op": "abs", "args": [load(0)]} if name == "pow" else load(0)
    got = ev({"op": name, "args": [a, load(1)]})
    assert got.shape == (CORES, I, J, K)
    want = _NP_BINARY[name](X.astype(np.float64), Y.astype(np.float64))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("combiner, fn", [("sum", np.sum), ("max", np.max), ("min", np.min)])
def test_reduce_over_local_axis(combiner: str, fn) -> None:
    got = ev({"op": "reduce", "combiner": combiner, "axes": ["k"], "args": [load(1)]})
    assert got.shape == (CORES, 1, J, 1)
    np.testing.assert_allclose(got, fn(Y, axis=3, keepdims=True), rtol=1e-6)


def test_sum_of_independent_axis_counts_positions() -> None:
    got = ev({"op": "reduce", "combiner": "sum", "axes": ["k"], "args": [load(0)]})
    np.testing.assert_allclose(got, X * K, rtol=1e-6)


def test_reduce_sum_of_product_uses_einsum(monkeypatch) -> None:
    calls = []
    real = np.einsum
    monkeypatch.setattr(expr_eval.np, "einsum", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    body = {"op": "mul", "args": [load(0), load(1)]}
    got = ExprEvaluator(ORDER, LENGTHS, loader).evaluate_sum(body, ["j"])
    assert calls, "a product of loads must be contracted with einsum"
    np.testing.assert_allclose(got, (X * Y).sum(axis=2, keepdims=True), rtol=1e-5)
    nested = {"op": "reduce", "combiner": "sum", "axes": ["k"],
              "args": [{"op": "mul", "args": [load(1), {"op": "mul", "args": [load(0), load(1)]}]}]}
    np.testing.assert_allclose(ev(nested), (Y * X * Y).sum(axis=3, keepdims=True), rtol=1e-5)


def test_evaluate_sum_plain_body() -> None:
    got = ExprEvaluator(ORDER, LENGTHS, loader).evaluate_sum(load(1), ["j", "k"])
    np.testing.assert_allclose(got, Y.sum(axis=(2, 3), keepdims=True), rtol=1e-5)


def test_select_cast_const_axis_result() -> None:
    cond = {"op": "gt", "args": [load(0), {"op": "const", "value": 0.0}]}
    got = ev({"op": "select", "args": [cond, load(0), {"op": "const", "value": -1.0}]})
    np.testing.assert_allclose(got, np.where(X > 0, X, -1.0))
    half = ev({"op": "cast", "dtype": "float16", "args": [load(0)]})
    np.testing.assert_array_equal(half, X.astype(np.float16).astype(np.float32))
    trunc = ev({"op": "cast", "dtype": "int32", "args": [load(0)]})
    np.testing.assert_array_equal(trunc, np.trunc(X))
    pos = np.arange(K).reshape(1, 1, 1, K) + 10
    got = ev({"op": "add", "args": [{"op": "axis", "axis": "k"}, {"op": "result"}]},
             axis_values={"k": pos}, result=X)
    np.testing.assert_allclose(got, pos + X)


def test_sigmoid_saturates_without_warnings() -> None:
    big = lambda node: np.full((1, 1, 1, 1), -1e4, np.float32)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = ExprEvaluator(ORDER, LENGTHS, big).evaluate({"op": "sigmoid", "args": [load(0)]})
    assert out.item() == 0.0


def test_errors() -> None:
    with pytest.raises(DeviceProgramError, match="unknown expression op"):
        ev({"op": "frobnicate", "args": []})
    with pytest.raises(DeviceProgramError, match="epilogue"):
        ev({"op": "result"})
    with pytest.raises(DeviceProgramError, match="unknown axis"):
        ev({"op": "reduce", "combiner": "sum", "axes": ["zz"], "args": [load(0)]})
