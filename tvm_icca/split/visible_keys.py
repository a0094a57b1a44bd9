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
for any condition that is not a band on ``j - i``. The condition is read by the partitioner's
one reader of mask predicates, :func:`tvm_icca.ops.masks.band_of_predicate`.
"""

from __future__ import annotations

from runtime_sim.contract.expr import TensorExpr, walk_expr
from tvm_icca.ops.masks import BandMask, band_of_predicate
from tvm_icca.split.attention_keys import key_axis
from tvm_icca.split.pieces import sub_expression

__all__ = ["FILL_BELOW", "query_axis", "trim_to_visible_keys", "visible_key_range"]

#: The largest mask value whose terms are dropped: ``exp(x)`` is exactly 0 in float32 below
#: about -103.97 (the smallest subnormal is 2^-149), so a fill at most this far below every
#: visible score contributes exact zeros; -1e4 leaves scores down to about -9,900 safe,
#: far beyond any attention logit (float16's lowest value is -65,504, half of it -32,752).
FILL_BELOW = -1e4


def query_axis(expr: TensorExpr) -> str | None:
    """The query-row axis of a fused attention whose score is ``select(cond, fill, s)`` with
    ``cond`` a band on the keys' offset from that axis (see the module docstring), else
    ``None``."""
    found = _band(expr)
    return found[0] if found else None


def visible_key_range(expr: TensorExpr) -> tuple[int, int] | None:
    """``(start, stop)``: the keys outside which every score of ``expr`` is masked.

    ``expr`` is a fused attention whose score is ``select(cond, fill, s)`` (a piece cut from
    a longer operator reads its axes shifted by its block's start,
    :func:`~tvm_icca.split.pieces.sub_expression`, so its own rows are meant). ``None`` when
    ``cond`` is not a band on ``j - i``, when its fill is above :data:`FILL_BELOW`, or when
    some row sees no key at all (see the module docstring).
    """
    found = _band(expr)
    if found is None:
        return None
    band = found[1]
    # row i sees keys [i + lower, i + upper]: the rows [0, rows) together see their union
    start = 0 if band.lower is None else max(0, band.lower)
    stop = band.keys if band.upper is None else min(band.keys, band.rows + band.upper)
    return start, stop


def _band(expr: TensorExpr) -> tuple[str, BandMask] | None:
    """``(query axis, band)`` of a score ``select(cond, fill <= FILL_BELOW, s)`` whose
    ``cond`` is a band on the keys' offset from one other axis, every row seeing a key."""
    j = key_axis(expr)
    if j is None:
        return None
    score = expr.body["args"][0]
    if score.get("op") != "select":
        return None
    cond, fill, _ = score["args"]
    if fill.get("op") != "const" or not float(fill["value"]) <= FILL_BELOW:
        return None
    spatial = {a.name for a in expr.axes if not a.reduce}
    read = {n["axis"] for n in walk_expr(cond) if n.get("op") == "axis"}
    if j not in read or len(read - {j}) != 1 or not (read - {j}) <= spatial:
        return None
    (i,) = read - {j}
    band = band_of_predicate(cond, expr.extent(i), expr.extent(j), i=i, j=j, unmasked=True)
    return None if band is None else (i, band)


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
