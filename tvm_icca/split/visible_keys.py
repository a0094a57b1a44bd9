"""The keys a fused attention's rows can see: where a causal or banded mask leaves nothing.

A causal language model masks key ``j`` of query ``i`` when ``j > i`` (and, in a
sliding-window layer, when ``i - j >= window``). Written on the axis values -- the score
``select(cond(i, j), fill, s)`` of :func:`tvm_icca.testing.exprs.attention_expr` and of the
partitioner's causal masks -- the mask tells the compiler, before anything runs, which keys
a block of queries can see: a query block ``[a, b)`` of a causal mask sees keys ``[0, b)``
only. Cutting a causal attention along its queries and giving each piece just its visible
keys (:func:`visible_key_range`) skips the blocks the mask hides whole, about half the
scores of a prefill: the causal block skipping of FlashAttention-2 (Dao 2023, §3.1.1), done
here by the split rewrite (:mod:`tvm_icca.split.region_split`) rather than inside a kernel.

Dropping the hidden keys is exact. A masked score holds ``fill``, and ``exp(fill - m)``
underflows to exactly ``0`` in float32 (``COMPUTE_DTYPE``) once ``fill - m < -104``; the
row's maximum ``m`` is at least its visible scores', and a mask's fill is far below any
score (exporters write the dtype's lowest finite value or half of it: about ``-3.4e38`` or
``-32752`` for float16 models), so the hidden keys add exact zeros to the sum and to the
product. This needs every row to keep at least one visible key (a row whose keys are all
hidden averages them uniformly): :func:`visible_key_range` returns ``None`` otherwise, and
for any mask it cannot read exactly (anything but comparisons of linear forms in the query
and key axes, joined by ``and``/``or``/``not``).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from runtime_sim.contract.expr import Expr, TensorExpr
from tvm_icca.split.attention_keys import key_axis
from tvm_icca.split.pieces import sub_expression

__all__ = ["FILL_BELOW", "query_axis", "trim_to_visible_keys", "visible_key_range"]

#: The largest mask value whose terms are dropped: ``exp(x)`` is exactly 0 in float32 below
#: about -103.97 (the smallest subnormal is 2^-149), so a fill at most this far below every
#: visible score contributes exact zeros; -1e4 leaves scores down to about -9,900 safe,
#: far beyond any attention logit (float16's lowest value is -65,504, half of it -32,752).
FILL_BELOW = -1e4

_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
_LOGIC = {"and": np.logical_and, "or": np.logical_or}


def query_axis(expr: TensorExpr) -> str | None:
    """The query-row axis a fused attention's mask reads besides the keys, if its score is
    ``select(cond, fill, s)`` with ``cond`` on the axis values of one other axis and the
    keys (see the module docstring), else ``None``."""
    found = _mask(expr)
    return found[0] if found else None


def visible_key_range(expr: TensorExpr) -> tuple[int, int] | None:
    """``(start, stop)``: the keys outside which every score of ``expr`` is masked.

    ``expr`` is a fused attention whose score is ``select(cond, fill, s)`` (a piece cut from
    a longer operator reads its axes shifted by its block's start,
    :func:`~tvm_icca.split.pieces.sub_expression`, so its own rows are meant). ``None`` when the mask is
    not one this module reads exactly, when its fill is above :data:`FILL_BELOW`, or when
    some row sees no key at all (see the module docstring).
    """
    found = _mask(expr)
    if found is None:
        return None
    i_axis, cond = found
    rows, keys = expr.extent(i_axis), expr.extent(key_axis(expr))
    i = np.arange(rows, dtype=np.int64)
    j = np.arange(keys, dtype=np.int64)
    # a key is visible to the block if some row sees it; every row must see some key
    seen_keys = _any_unmasked(cond, i_axis, key_axis(expr), fixed=j, free=(0, rows),
                              fixed_is_key=True)
    seen_rows = _any_unmasked(cond, i_axis, key_axis(expr), fixed=i, free=(0, keys),
                              fixed_is_key=False)
    if seen_keys is None or seen_rows is None or not seen_rows.all() or not seen_keys.any():
        return None
    visible = np.flatnonzero(seen_keys)
    return int(visible[0]), int(visible[-1]) + 1


def _mask(expr: TensorExpr) -> tuple[str, Expr] | None:
    """``(query axis, cond)`` of a score ``select(cond, fill <= FILL_BELOW, s)`` whose
    ``cond`` is linear comparisons of the key axis and one other axis."""
    j = key_axis(expr)
    if j is None:
        return None
    score = expr.body["args"][0]
    if score.get("op") != "select":
        return None
    cond, fill, _ = score["args"]
    if fill.get("op") != "const" or not float(fill["value"]) <= FILL_BELOW:
        return None
    axes = _axes_of(cond)
    if axes is None or j not in axes or len(axes) != 2:
        return None
    (i_axis,) = axes - {j}
    if i_axis not in {a.name for a in expr.axes if not a.reduce}:
        return None
    return i_axis, cond


def _axes_of(node: Expr) -> set[str] | None:
    """The axes a condition reads, or ``None`` if it is not of the readable form."""
    op = node.get("op")
    if op in _LOGIC:
        parts = [_axes_of(a) for a in node["args"]]
        return None if any(p is None for p in parts) else set().union(*parts)
    if op == "not":
        return _axes_of(node["args"][0])
    if op in _COMPARE:
        forms = [_linear(a) for a in node["args"]]
        if any(f is None for f in forms):
            return None
        return {a for f in forms for a in f if a and f[a]}
    return None


def _linear(node: Expr) -> dict[str, float] | None:
    """``node`` as ``{axis: coefficient, "": constant}``, or ``None`` if not linear."""
    op = node.get("op")
    if op == "axis":
        return {node["axis"]: 1.0, "": 0.0}
    if op == "const":
        return {"": float(node["value"])}
    if op in ("add", "sub", "mul"):
        a, b = (_linear(x) for x in node["args"])
        if a is None or b is None:
            return None
        if op == "mul":
            if set(a) == {""}:
                a, b = b, a
            if set(b) != {""}:
                return None  # a product of two axes
            return {k: v * b[""] for k, v in a.items()}
        sign = 1.0 if op == "add" else -1.0
        return {k: a.get(k, 0.0) + sign * b.get(k, 0.0) for k in set(a) | set(b)}
    return None


def _any_unmasked(cond: Expr, i_axis: str, j_axis: str, fixed: np.ndarray, free: tuple[int, int],
                  fixed_is_key: bool) -> np.ndarray | None:
    """For each value of the ``fixed`` axis, whether some value of the other axis in
    ``[free)`` leaves ``cond`` false. Exact without visiting every pair: ``cond`` is a
    boolean function of comparisons that are linear in the free axis, so it is constant
    between the points where one comparison flips; evaluating it at both ends of the range
    and around every flip point visits every such interval."""
    lo, hi = free
    if hi <= lo:
        return np.zeros(fixed.shape, bool)
    free_name, fixed_name = (i_axis, j_axis) if fixed_is_key else (j_axis, i_axis)
    points = [np.full(fixed.shape, lo, np.int64), np.full(fixed.shape, hi - 1, np.int64)]
    for atom in _atoms(cond):
        a, b = (_linear(x) for x in atom["args"])
        diff = {k: a.get(k, 0.0) - b.get(k, 0.0) for k in set(a) | set(b)}
        slope = diff.get(free_name, 0.0)
        if slope == 0:
            continue
        # where the comparison's two sides meet, as a function of the fixed axis
        at = -(diff.get("", 0.0) + diff.get(fixed_name, 0.0) * fixed) / slope
        base = np.floor(at).astype(np.int64)
        points += [np.clip(base + d, lo, hi - 1) for d in (-1, 0, 1, 2)]
    env_fixed = fixed.astype(np.float64)
    out = np.zeros(fixed.shape, bool)
    for p in points:
        env = {free_name: p.astype(np.float64), fixed_name: env_fixed}
        value = _evaluate(cond, env)
        if value is None:
            return None
        out |= ~value
    return out


def _atoms(node: Expr):
    op = node.get("op")
    if op in _COMPARE:
        yield node
    elif op in _LOGIC or op == "not":
        for a in node["args"]:
            yield from _atoms(a)


def _evaluate(node: Expr, env: Mapping[str, np.ndarray]) -> np.ndarray | None:
    op = node.get("op")
    if op in _LOGIC:
        parts = [_evaluate(a, env) for a in node["args"]]
        if any(p is None for p in parts):
            return None
        return _LOGIC[op](*parts)
    if op == "not":
        inner = _evaluate(node["args"][0], env)
        return None if inner is None else ~inner
    a, b = (_linear(x) for x in node["args"])
    if a is None or b is None:
        return None
    left, right = (sum(env[k] * v if k else v for k, v in f.items()) for f in (a, b))
    return _COMPARE[op](left, right)



def trim_to_visible_keys(expr: TensorExpr) -> TensorExpr:
    """``expr`` over only the keys its rows can see (:func:`visible_key_range`), or ``expr``
    itself when that is every key or the mask cannot be read exactly. The output is the
    operator's whole result (the hidden keys add exact zeros), so nothing joins the piece."""
    found = visible_key_range(expr)
    if found is None:
        return expr
    start, stop = found
    j = key_axis(expr)
    if (start, stop) == (0, expr.extent(j)):
        return expr
    return sub_expression(expr, j, start, stop - start, expr.output.name, whole=True)
