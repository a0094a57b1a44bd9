"""The keys a causal or banded attention's rows can see (tvm_icca.split.visible_keys), checked
against every (query, key) pair, and causal attention cut into query pieces over only those
keys (region_split, split_choice.causal_split), run on the functional device against numpy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import OpProgram, TensorDecl
from runtime_sim.functional.device import SimulatedDevice
from tvm_icca.lower.region import PendingOp, RegionOps
from tvm_icca.split.pieces import sub_expression
from tvm_icca.split.region_split import SplitChoice, split_region
from tvm_icca.split.split_choice import causal_split
from tvm_icca.split.visible_keys import query_axis, trim_to_visible_keys, visible_key_range
from tvm_icca.testing.exprs import attention_expr, attention_reference

HW = small_chip(4)


def _axis(a: str) -> dict:
    return {"op": "axis", "axis": a}


def _const(v: float) -> dict:
    return {"op": "const", "value": v}


def _banded(rows: int, keys: int, window: int, **kwargs) -> TensorExpr:
    """Gemma 2's sliding window: key j hidden from query i when j > i + (keys - rows) or
    i + (keys - rows) - j >= window."""
    expr = attention_expr(rows, keys, 4, causal=True, **kwargs)
    score = expr.body["args"][0]
    after, fill, inner = score["args"]
    too_old = {"op": "ge", "args": [{"op": "sub", "args": [
        {"op": "add", "args": [_axis("i"), _const(keys - rows)]}, _axis("j")]}, _const(window)]}
    cond = {"op": "or", "args": [after, too_old]}
    body = {**expr.body, "args": [{**score, "args": [cond, fill, inner]}, expr.body["args"][1]]}
    return replace(expr, body=body)


def _hidden(rows: int, keys: int, window: int | None) -> np.ndarray:
    """Every (i, j) pair's mask, written from the definition."""
    i = np.arange(rows)[:, None] + (keys - rows)
    j = np.arange(keys)[None, :]
    hidden = j > i
    if window is not None:
        hidden |= i - j >= window
    return hidden


@pytest.mark.parametrize("rows,keys,window", [(24, 24, None), (8, 24, None), (24, 24, 5),
                                              (30, 30, 7), (12, 40, 9)])
def test_visible_keys_of_every_block_match_all_pairs(rows, keys, window) -> None:
    expr = attention_expr(rows, keys, 4, causal=True) if window is None else _banded(rows, keys, window)
    assert query_axis(expr) == "i"
    hidden = _hidden(rows, keys, window)
    for start, length in [(0, rows), (0, 1), (rows - 1, 1), (3, 5), (rows // 2, rows - rows // 2)]:
        piece = sub_expression(expr, "i", start, length, "O")
        seen = np.flatnonzero(~hidden[start:start + length].all(axis=0))
        assert visible_key_range(piece) == (int(seen[0]), int(seen[-1]) + 1), (start, length)


def test_masks_it_cannot_read_exactly_are_left_alone() -> None:
    plain = attention_expr(8, 8, 4)
    assert query_axis(plain) is None and visible_key_range(plain) is None
    causal = attention_expr(8, 8, 4, causal=True)
    score = causal.body["args"][0]
    # a fill that does not underflow exp() to zero: the hidden keys still count
    mild = replace(causal, body={**causal.body, "args": [
        {**score, "args": [score["args"][0], _const(-50.0), score["args"][2]]}, causal.body["args"][1]]})
    assert visible_key_range(mild) is None and trim_to_visible_keys(mild) is mild
    # a product of the two axes is not a linear comparison
    cond = {"op": "gt", "args": [{"op": "mul", "args": [_axis("i"), _axis("j")]}, _const(9)]}
    quadratic = replace(causal, body={**causal.body, "args": [
        {**score, "args": [cond, score["args"][1], score["args"][2]]}, causal.body["args"][1]]})
    assert visible_key_range(quadratic) is None
    # a row that sees no key at all (keys - rows < 0: query 0 sees key -1) would change
    assert visible_key_range(attention_expr(8, 4, 4, causal=True)) is None


def _region(expr: TensorExpr) -> RegionOps:
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype) for t in expr.inputs)
    op = PendingOp("attn", expr, tuple(t.name for t in expr.inputs), expr.output.name, "attention")
    return RegionOps("r0", decls, (op,), (expr.output.name,), {})


def _run(region: RegionOps, args: list[np.ndarray]) -> np.ndarray:
    ops = []
    for op in region.ops:
        axis = next((a.name for a in op.expr.axes if a.extent >= 2 and not a.reduce), None)
        plan = ExecutionPlan({axis: 2} if axis else {}, tuple({} for _ in op.expr.tensors))
        ops.append(OpProgram(op.name, op.expr, plan, op.input_names, op.output_name, label=op.label))
    (out,) = SimulatedDevice().run(region.program(HW, ops), args)
    return out


@pytest.mark.parametrize("window,dtype", [(None, "float32"), (None, "float16"), (6, "float32")])
def test_query_pieces_see_only_their_keys_and_stay_exact(window, dtype) -> None:
    rows = keys = 16
    expr = (attention_expr(rows, keys, 4, batch=(2,), causal=True, dtype=dtype) if window is None
            else _banded(rows, keys, window, batch=(2,), dtype=dtype))
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(t.shape).astype(t.dtype) for t in expr.inputs]
    split = split_region(_region(expr), [SplitChoice(0, "i", 4)])
    pieces = [op.expr for op in split.ops if op.expr.kind == "attention"]
    hidden = _hidden(rows, keys, window)
    for k, piece in enumerate(pieces):
        seen = np.flatnonzero(~hidden[4 * k:4 * k + 4].all(axis=0))
        assert piece.extent("j") == seen[-1] + 1 - seen[0]
        view = piece.inputs[1].view  # K read from the first visible key (no view: all of it)
        assert (view.start[1] if view is not None else 0) == seen[0]
    full = sum(p.flops() for p in pieces)
    assert full < expr.flops() * (0.75 if window is None else 0.6)  # the hidden blocks are not computed
    got = _run(split, args)
    if window is None:
        ref = attention_reference(*args, causal=True, dtype=dtype)
    else:
        lowest = np.finfo(np.dtype(dtype)).min
        s = np.where(hidden, np.float32(lowest), 0.0).astype(np.float32)
        ref = attention_reference(*args, mask=s, dtype=dtype)
    np.testing.assert_allclose(got, ref.astype(dtype), rtol=2e-3 if dtype == "float16" else 1e-5, atol=1e-3 if dtype == "float16" else 1e-6)


def test_a_causal_attention_is_cut_when_its_pieces_are_estimated_faster() -> None:
    expr = attention_expr(64, 64, 8, causal=True)

    def work(overhead: float):
        # a stand-in plan search: time proportional to the FLOPs, plus a fixed part per operator
        return lambda piece, budget, name, *arriving: overhead + piece.flops() * 1e-12

    choice = causal_split(expr, HW, work(0.0), "attention", 0)
    assert choice is not None and choice.axis == "i" and choice.pieces > 2
    pieces, total = choice.pieces, choice.estimated_time_s
    # the estimate is the pieces' own FLOPs: keys (k + 1) / n of the whole for piece k
    assert total == pytest.approx(expr.flops() * 1e-12 * (pieces + 1) / (2 * pieces))
    # a fixed cost per operator larger than the saving: the whole operator stays
    assert causal_split(expr, HW, work(expr.flops() * 1e-12), "attention", 0) is None
    # no mask on the axis values: nothing to skip
    assert causal_split(attention_expr(64, 64, 8), HW, work(0.0), "attention", 0) is None
