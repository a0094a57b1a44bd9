"""What a tensor expression allows a plan to do: the rules read off the expression alone.

T10 §4.2 and §5 constrain plans by the operator's structure, before any plan exists:

* :func:`pinned_axes` -- axes no plan may split or rotate (compound indices such as a
  convolution window, core-local axes, axes of gathered reads);
* :func:`local_splits` -- inner reductions (softmax's row, layer norm's statistics) whose
  axis a plan may still split across cores, combined exactly afterwards;
* :func:`split_reductions` / :func:`reduce_key` -- which combine each such split needs;
* :func:`padding_safe_reduce` -- whether padding a reduction axis leaves its result exact;
* :func:`padded_extent` -- the padded sub-operator extent of an axis;
* :func:`fixed_axes` -- axes a plan may split but not rotate (attention's rows and features);
* :func:`attention_state_bytes` / :func:`attention_scratch_bytes` -- the SRAM an attention
  operator needs beyond its partitions (the online-softmax state and one step's scores).

:class:`~runtime_sim.contract.layout.OpLayout` (what a plan means on the cores), the compiler's
plan space (:mod:`tvm_icca.plan_search.structure`) and the validation read these, so the rules exist
once.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

from runtime_sim.contract.expr import (
    AffineIndex,
    TensorExpr,
    attention_roles,
    expr_loads,
    load_index,
    walk_expr,
)

#: bytes of one partial statistic combined across cores (computed in float32, COMPUTE_DTYPE)
STAT_BYTES = 4
#: bytes of one attention score held in a core's scratch during a step (float32, COMPUTE_DTYPE)
SCORE_BYTES = 4
#: the online-softmax statistics an attention operator keeps per row: running max and sum
ATTENTION_STATS = 2
#: Rows of scores a core holds at once: its per-step kernel takes its rows in blocks of the
#: matrix unit's tile rows (scores, softmax and ``P V`` of one block before the next, as
#: FlashAttention's inner loop does), so one block of scores is live. 16 is the tile's row
#: count on the IPU presets (``matrix_tile`` (16, 16, 16), the AMP unit padded to 16) and
#: at least the others' (8 on the Tenstorrent presets): a layout holds no chip, so the
#: contract takes the largest.
SCORE_ROW_BLOCK = 16


_Rule = TypeVar("_Rule")


def _per_expression(rule: Callable[[TensorExpr], _Rule]) -> Callable[[TensorExpr], _Rule]:
    """``rule`` computed once per expression and kept on it (a :class:`TensorExpr` is frozen
    and these rules read only its fields): layouts, plan spaces, schedules and the validation
    ask them again for every plan of one operator (a plan search's ring checks, a layout per
    candidate). Each call gets its own copy of a set or dict result, as before."""
    name = rule.__name__

    @functools.wraps(rule)
    def cached(expr: TensorExpr) -> _Rule:
        memo = expr.__dict__.get("_rule_memo")
        if memo is None:
            memo = {}
            object.__setattr__(expr, "_rule_memo", memo)   # not a field: eq, hash, repr
        if name not in memo:
            memo[name] = rule(expr)
        return copy.copy(memo[name])

    return cached


def padded_extent(extent: int, parts: int, steps: int) -> int:
    """``S * ceil(ceil(E / F) / S)``: the sub-operator extent, padded so that S steps divide it."""
    return steps * math.ceil(math.ceil(extent / parts) / steps)


@_per_expression
def pinned_axes(expr: TensorExpr) -> set[str]:
    """Axes that cannot be partitioned (neither split nor rotated).

    * Axes that share a tensor dimension with a core-local axis: a dimension read with a
      core-local axis (a softmax row, a layer-norm statistic) must be whole on every core,
      so any axis that also indexes that dimension stays unsplit.
    * Top-level reduction axes of a ``max``/``min`` combiner (:class:`TensorExpr`): each
      core reduces whole windows.
    * The inner axes of an output dimension that merges axes row-major
      (:attr:`TensorExpr.merged_inner_axes`, :func:`~runtime_sim.contract.expr.merged_axes`: a
      reshape ``[B, S, H, D] -> [B, S, H*D]``, a grouped convolution's channel
      ``g*(F/G) + f``). This is the layout rule of such a dimension: only its outermost axis
      is partitioned, so every core's share of it is one contiguous block (whole groups,
      whole heads), the output blocks stay boxes (placement grids, re-layouts and the
      assembled output need boxes, :func:`producer_grid`), and the other tensors indexed by
      the same axes (the weight's ``g*(F/G) + f``) get the same boxes.
    """
    local = {a.name for a in expr.local_axes}
    pinned: set[str] = set(expr.merged_inner_axes)
    # a max/min over top-level axes: its partial results could not be summed into ring 0
    # (attention's softmax combiner combines its replicas exactly: its key axis splits)
    if expr.combiner in ("max", "min"):
        pinned.update(expr.reduce_axes)
    accesses: list[tuple[int, tuple[AffineIndex, ...]]] = []
    for node in expr_loads(expr.body) + expr_loads(expr.epilogue):
        accesses.append((int(node["input"]), load_index(node)))
    for t, access in enumerate(expr.inputs):
        accesses.append((t, access.indices))
    whole_dims = {
        (t, d) for t, idx in accesses for d, i in enumerate(idx) if set(i.axes) & local
    }
    for t, idx in accesses:
        for d, i in enumerate(idx):
            if (t, d) in whole_dims:
                pinned.update(a for a in i.axes if a not in local)
    return pinned


@_per_expression
def local_splits(expr: TensorExpr) -> dict[str, str]:
    """Core-local axes a plan may split across cores: local axis -> the pinned axis it follows.

    A wide reduction (a layer-norm or RMS-norm statistic, a softmax row) reads a dimension
    that a top-level axis ``a`` also indexes (``X[i, j]`` and ``sum_k X[i, k]``). Splitting
    ``a`` in ``F_a`` parts splits every local axis that follows it the same way: the core
    at grid index ``g_a`` holds positions ``[g_a * E_a / F_a, (g_a + 1) * E_a / F_a)`` of the
    row, its reductions over those axes give partial statistics, and the cores sharing a
    row combine them (:meth:`OpLayout.combine_groups`, sum / max / min across the group) before
    the rest of the expression uses them. A local axis follows ``a`` when every dimension
    it indexes is indexed, at every access, by itself or by ``a`` alone (plain indices,
    same extent). The axis ``a`` may then be split (F_a dividing its extent, no rotation on
    it) only when every local axis sharing a dimension with it follows it; operators with a
    top-level reduction or with local axes in the epilogue are never split this way.
    """
    local = {a.name: a.extent for a in expr.local_axes}
    if not local or expr.reduce_axes:
        return {}
    extent = {a.name: a.extent for a in expr.axes}
    accesses: list[tuple[int, tuple[AffineIndex, ...]]] = []
    for node in expr_loads(expr.body) + expr_loads(expr.epilogue):
        accesses.append((int(node["input"]), load_index(node)))
    for t, access in enumerate(expr.tensors[:-1]):
        accesses.append((t, access.indices))
    accesses.append((-1, expr.output.indices))
    epilogue_axes = {n["axis"] for n in walk_expr(expr.epilogue)} if expr.epilogue else set()
    for node in expr_loads(expr.epilogue):
        epilogue_axes.update(a for i in load_index(node) for a in i.axes)
    users: dict[tuple[int, int], set[str]] = {}  # (tensor, dim) -> axes indexing it
    bad: set[str] = epilogue_axes & set(local)  # in a compound index, or local in the epilogue
    for t, idx in accesses:
        for d, i in enumerate(idx):
            users.setdefault((t, d), set()).update(i.axes)
            if not i.is_simple:
                bad.update(i.axes)
    follow: dict[str, str] = {}
    for name, n in local.items():
        tops = {a for users_d in users.values() if name in users_d for a in users_d if a not in local}
        if name in bad or len(tops) != 1:
            continue
        (a,) = tops
        if a not in bad and extent[a] == n:
            follow[name] = a
    # a pinned axis splits only if every local axis reading one of its dimensions follows it
    blocked = {a for users_d in users.values() if users_d & set(local)
               for a in users_d if a not in local and any(follow.get(b) != a for b in users_d & set(local))}
    return {l: a for l, a in follow.items() if a not in blocked}


def reduce_key(node: dict, follow: Mapping[str, str]) -> str:
    """One key for reductions that compute the same statistic under other local axis names
    (softmax's two row maxima, layer norm's two means): split local axes renamed to the
    axis they follow."""
    def rename(n: dict) -> dict:
        out = dict(n)
        if n["op"] == "reduce":
            out["axes"] = sorted(follow.get(a, a) for a in n["axes"])
        if n["op"] == "load":
            out["index"] = [
                {**i, "terms": [[follow.get(a, a), c] for a, c in i.get("terms", ())]}
                for i in n["index"]
            ]
        if "args" in n:
            out["args"] = [rename(a) for a in n["args"]]
        return out

    return json.dumps(rename(node), sort_keys=True)


def split_reductions(expr: TensorExpr, follow: Mapping[str, str]) -> dict[str, tuple[int, frozenset]]:
    """The distinct reductions of the body over the split local axes ``follow``:
    :func:`reduce_key` -> (level, top-level axes the statistic depends on).

    Level 1 statistics need no other combined statistic; a level ``n`` one (the variance
    around a combined mean, softmax's sum of exp around the combined max) waits for level
    ``n - 1``: the combine steps of one operator are its levels, one after another.
    """
    found: dict[str, tuple[int, frozenset]] = {}
    local = {a.name for a in expr.local_axes}

    def visit(node: dict) -> tuple[set, int]:
        op = node["op"]
        if op == "load":
            return {a for i in load_index(node) for a in i.axes}, 0
        if op == "axis":
            return {node["axis"]}, 0
        free, level = set(), 0
        for arg in node.get("args", ()):
            f, lv = visit(arg)
            free |= f
            level = max(level, lv)
        if op == "reduce":
            free -= set(node["axes"])
            if set(node["axes"]) & set(follow):
                level += 1
                key = reduce_key(node, follow)
                old = found.get(key, (0, frozenset()))
                found[key] = (max(old[0], level), frozenset(free - local))
        return free, level

    if follow:
        visit(expr.body)
    return found


@_per_expression
def fixed_axes(expr: TensorExpr) -> set[str]:
    """Axes a plan may split across cores but on which no tensor rotates.

    An attention operator keeps one online-softmax state per row of its output partition and
    updates it once per block of keys (:func:`attention_state_bytes`): its blocks of rows
    and features must stay on their cores for all steps, so only its key axis ``j`` takes
    temporal factors (T10's rotation of K, V and the mask's blocks). Empty for other kinds.
    """
    if expr.kind != "attention":
        return set()
    return {a.name for a in expr.axes if a.name != attention_roles(expr).key}


def attention_state_bytes(expr: TensorExpr, lengths: Mapping[str, Any]) -> Any:
    """Bytes of the online-softmax state of an attention operator on one core whose output
    partition spans ``lengths`` (axis -> length) of the rows: a running max and a running
    sum (:data:`ATTENTION_STATS`, float32) per row. It sits beside the output partition
    and travels with it when replicas are combined. ``lengths`` may hold integer arrays
    (one entry per plan: the compiler's batched plan space)."""
    rows = math.prod((lengths[a] for a in attention_roles(expr).rows), start=1)
    return ATTENTION_STATS * STAT_BYTES * rows


def attention_scratch_bytes(expr: TensorExpr, rp: Mapping[str, Any]) -> Any:
    """Bytes of the scores live on a core of an attention operator during a step: a block
    of :data:`SCORE_ROW_BLOCK` rows (fewer if the core has fewer) by the step's keys, float32
    (``rp``: the step's chunk length per axis, ints or integer arrays). They never leave the
    core: the probabilities overwrite them in place before the weighted sum."""
    roles = attention_roles(expr)
    rows = math.prod((rp[a] for a in roles.rows), start=1)
    return SCORE_BYTES * np.minimum(rows, SCORE_ROW_BLOCK) * rp[roles.key]


@_per_expression
def padding_safe_reduce(expr: TensorExpr) -> bool:
    """True when zero-padded inputs add nothing to the reduced sum.

    A reduction axis padded past its extent reads positions beyond the tensors, which the
    device zero-fills. That adds nothing when the body is a product one of whose factors
    reads such a position as zero: a load that indexes the axis alone, over a dimension as
    long as the axis (matmul's ``B[k, n]``, a convolution's weight ``W[f, c, kh, kw]``). A
    body like ``exp(x)`` would add exp(0) = 1 per padded element, and a window read
    ``x[h*s + kh]`` alone (average pooling) would add real elements of the next window, so
    their reduction axes must not be padded. Attention's key axis may be padded: the cores
    leave padded keys out of the softmax (their scores are ``-inf``).
    """
    if expr.kind == "attention":
        return True
    extent = {a.name: a.extent for a in expr.axes}

    def zero_when_padded(node: dict, axis: str) -> bool:
        if node["op"] == "load":
            shape = expr.inputs[int(node["input"])].shape
            return any(ix.is_simple and ix.terms[0][0] == axis and extent[axis] == shape[d]
                       for d, ix in enumerate(load_index(node)))
        if node["op"] == "mul":
            return any(zero_when_padded(a, axis) for a in node["args"])
        if node["op"] in ("cast", "neg"):
            return zero_when_padded(node["args"][0], axis)
        return False

    return all(zero_when_padded(expr.body, a) for a in expr.reduce_axes)
