"""Causal and banded masks as a predicate on the axis values (tvm_icca.ops.masks).

A mask ``M`` added to the attention scores that no input computes -- an initializer, a chain
of shape-only ops, the zoo's in-graph mask -- must reach the fused attention as
``select(cond, fill, score)`` with ``cond`` on the axes ``i`` and ``j``, never as an ``[S, S]``
input; any other mask keeps its tensor. The references are independent: numpy grids of the
band, ``onnx.reference``, the same graph compiled with the mask kept as a tensor.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_icca
import tvm_icca.partition.partitioner as partitioner
from runtime_sim.contract.expr import walk_expr
from tvm_icca import load_onnx
from tvm_icca.lower.region import extract_region
from tvm_icca.ops.masks import (
    BandMask,
    band_of_array,
    band_of_predicate,
    band_of_relax,
    predicate_expr,
)
from tvm_icca.testing.attention_exports import BANDED, NOT_BANDED, Dims
from tvm_icca.testing.export_corpus import check_case, reference_outputs
from tvm_icca.workloads import get_workload
from tvm_icca.workloads._layers import causal_mask_sampler

HW = tvm_icca.small_chip(64)
LOWEST = float(np.finfo(np.float32).min)


def _grid(rows: int, keys: int, upper: int | None, lower: int | None, fill: float) -> np.ndarray:
    """The additive mask written from its definition, entry by entry."""
    m = np.zeros((rows, keys), np.float32)
    for i in range(rows):
        for j in range(keys):
            if (upper is not None and j - i > upper) or (lower is not None and j - i < lower):
                m[i, j] = fill
    return m


# -- by value ---------------------------------------------------------------------------------
@pytest.mark.parametrize("rows, keys, upper, lower", [
    (8, 8, 0, None),  # causal
    (4, 8, 4, None),  # causal, more keys than rows (a prompt after cached tokens)
    (8, 8, 0, -2),  # a window of 3
    (6, 6, None, -1),  # only a lower bound
])
def test_a_band_is_read_by_value(rows, keys, upper, lower):
    for fill in (LOWEST, LOWEST / 2, -np.inf):
        grid = _grid(rows, keys, upper, lower, fill)
        band = band_of_array(grid[None, None])
        assert band == BandMask(rows, keys, upper, lower, float(np.float32(fill)))
        assert np.array_equal(band.masked(), grid != 0)
    fp16 = _grid(rows, keys, upper, lower, float(np.finfo(np.float16).min)).astype(np.float16)
    assert band_of_array(fp16) is not None


def test_what_is_not_a_band_is_not_read_as_one():
    causal = _grid(8, 8, 0, None, LOWEST)
    assert band_of_array(np.zeros((8, 8), np.float32)) is None  # masks nothing
    hole = causal.copy()
    hole[7, 2] = LOWEST  # a masked key inside a row's visible keys
    assert band_of_array(hole) is None
    extra = causal.copy()
    extra[0, 1] = 0.0  # row 0 sees one key more than the band
    assert band_of_array(extra) is None
    two_fills = causal.copy()
    two_fills[0, 7] = LOWEST / 2
    assert band_of_array(two_fills) is None
    assert band_of_array(_grid(8, 8, 0, None, -1e4)) is None  # not far below every score
    assert band_of_array(np.where(causal != 0, 1.0, 0.0)) is None  # positive
    assert band_of_array(np.stack([causal, causal])) is None  # a batch axis of extent 2
    assert band_of_array(np.random.default_rng(0).standard_normal((8, 8))) is None
    # a row that sees no key: the softmax of the unfused graph is not the predicate's
    empty = _grid(8, 8, 0, None, LOWEST)
    empty[3, :] = LOWEST
    assert band_of_array(empty) is None
    assert BandMask(4, 8, -1, None, LOWEST).every_row_sees_a_key() is False


def test_the_predicate_is_the_band():
    for band in (BandMask(8, 8, 0, None, LOWEST), BandMask(8, 8, 0, -3, LOWEST),
                 BandMask(4, 8, 4, 1, LOWEST)):
        cond = predicate_expr(band)
        assert {n["op"] for n in walk_expr(cond)} <= {"gt", "lt", "or", "axis", "add", "const"}
        assert band_of_predicate(cond, band.rows, band.keys) == BandMask(
            band.rows, band.keys, band.upper, band.lower, -np.inf)
    # the contract's causal form: j > i + (keys - rows)
    assert predicate_expr(BandMask(4, 8, 4, None, LOWEST)) == {"op": "gt", "args": [
        {"op": "axis", "axis": "j"},
        {"op": "add", "args": [{"op": "axis", "axis": "i"}, {"op": "const", "value": 4}]}]}
    # a predicate on i + j is no band
    skew = {"op": "gt", "args": [{"op": "add", "args": [{"op": "axis", "axis": "i"},
                                                        {"op": "axis", "axis": "j"}]},
                                 {"op": "const", "value": 5}]}
    assert band_of_predicate(skew, 8, 8) is None


# -- a chain of shape-only ops, read symbolically --------------------------------------------
def _chain(build) -> tuple[relax.Var, dict, tvm.IRModule]:
    """The mask ``build(bb)`` emits in a function with no inputs, its bindings, the module."""
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        with bb.dataflow():
            out = bb.emit_output(build(bb))
        bb.emit_func_output(out)
    mod = bb.get()
    bound = {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}
    return out, bound, mod


def _value(mod: tvm.IRModule) -> np.ndarray:
    """What the chain computes, by TVM on the CPU."""
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"]().numpy()


def _rows_cols(bb, n):
    pos = bb.emit(relax.op.arange(0, n, 1, "int64"))
    return (bb.emit(relax.op.reshape(pos, (n, 1))), bb.emit(relax.op.expand_dims(pos, 0)))


@pytest.mark.parametrize("kind", ["hf_where", "triu_full", "window_and", "masked_fill"])
def test_shape_only_chains_are_read_symbolically(kind):
    n, lowest = 6, relax.const(LOWEST, "float32")
    zero = relax.const(0.0, "float32")

    def build(bb):
        rows, cols = _rows_cols(bb, n)
        if kind == "hf_where":
            return relax.op.where(bb.emit(relax.op.less_equal(cols, rows)), zero, lowest)
        if kind == "triu_full":
            return relax.op.triu(bb.emit(relax.op.full((n, n), lowest)), 1)
        if kind == "window_and":
            visible = relax.op.logical_and(
                bb.emit(relax.op.greater_equal(rows, cols)),
                bb.emit(relax.op.less(bb.emit(relax.op.subtract(rows, cols)),
                                      relax.const(3, "int64"))))
            mask = bb.emit(relax.op.where(bb.emit(visible), zero, lowest))
            return relax.op.broadcast_to(mask, (1, 1, n, n))
        # masked_fill(zeros, j > i, lowest) after a cast of the condition
        above = bb.emit(relax.op.astype(bb.emit(relax.op.greater(cols, rows)), "float32"))
        return relax.op.multiply(above, lowest)

    mask, bound, mod = _chain(build)
    band = band_of_relax(mask, bound, n, n)
    assert band is not None, kind
    want = _value(mod).reshape(n, n)
    assert np.array_equal(np.where(band.masked(), np.float32(band.fill), np.float32(0)), want)


def test_a_mask_read_from_an_input_is_not_a_band():
    n = 4
    x = relax.Var("pad", relax.TensorType((1, n), "int64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            pos = bb.emit(relax.op.reshape(bb.emit(relax.op.arange(0, n, 1, "int64")), (n, 1)))
            out = bb.emit_output(relax.op.where(bb.emit(relax.op.less(x, pos)),
                                                relax.const(0.0), relax.const(LOWEST)))
        bb.emit_func_output(out)
    bound = {b.var: b.value for block in bb.get()["main"].body.blocks for b in block.bindings}
    assert band_of_relax(out, bound, n, n) is None


# -- exporter-shaped graphs on the chip -------------------------------------------------------
SMALL = Dims(batch=1, heads=2, tokens=6, head_dim=8)


def _attention_expr(part):
    (op,) = [op for name, func in partitioner.icca_regions(part).items()
             for op in extract_region(func, name, HW).ops if op.expr.kind == "attention"]
    return op.expr


@pytest.mark.parametrize("name", sorted(BANDED))
def test_banded_masks_become_predicates_on_the_chip(name, monkeypatch):
    """The mask is no input of the fused attention, and the result is bit for bit the one
    of the same graph compiled with the mask as a tensor input of the fused attention."""
    case = BANDED[name](SMALL)
    expr = _attention_expr(partitioner.partition_for_icca(load_onnx(case.model), HW))
    assert [t.shape for t in expr.inputs] == [case.inputs[n].shape for n in "qkv"]
    score = expr.body["args"][0]
    assert score["op"] == "select" and {n["op"] for n in walk_expr(score["args"][0])} <= {
        "gt", "lt", "or", "axis", "add", "const"}
    chip = tvm_icca.small_chip(16)
    result = check_case(case, chip)
    assert result.host_ops == {} and result.device_calls == 1, result
    assert result.max_rel_error <= 1e-5, result
    got = _run(case, chip)
    with monkeypatch.context() as patch:
        patch.setattr(partitioner, "MasksAsPredicates", lambda: tvm.transform.Sequential([]))
        as_tensor = _attention_expr(partitioner.partition_for_icca(load_onnx(case.model), HW))
        assert len(as_tensor.inputs) == 4  # the mask, as before
        kept = _run(case, chip)
    assert np.array_equal(got, kept)
    assert np.allclose(got, reference_outputs(case)[0], rtol=1e-5, atol=1e-6)


def _run(case, hw) -> np.ndarray:
    vm = relax.VirtualMachine(tvm_icca.compile_onnx(case.model, hw=hw), tvm.cpu())
    return vm["main"](*(tvm.runtime.tensor(case.inputs[n]) for n in "qkv")).numpy()


@pytest.mark.parametrize("name", sorted(NOT_BANDED))
def test_other_constant_masks_stay_tensors(name):
    case = NOT_BANDED[name](SMALL)
    expr = _attention_expr(partitioner.partition_for_icca(load_onnx(case.model), HW))
    assert len(expr.inputs) == 4 and expr.inputs[3].shape[-2:] == (SMALL.tokens, SMALL.tokens)
    assert not any(n["op"] == "axis" for n in walk_expr(expr.body))
    result = check_case(case, tvm_icca.small_chip(16))
    assert result.max_rel_error <= 1e-5, result


# -- the zoo ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, seq_len, bands", [
    ("llama2-7b", 12, [(0, None)] * 2),
    ("gemma2-27b", 12, [(0, -7), (0, None)]),  # tiny window 8: the even layer is local
])
def test_zoo_prefill_attention_reads_q_k_v_only(name, seq_len, bands):
    w = get_workload(name, tiny=True, phase="prefill", seq_len=seq_len)
    assert not [p for p in w.params if "mask" in p.name or p.kind == "mask"]
    part = partitioner.partition_for_icca(w.mod, HW)
    exprs = [op.expr for rname, func in partitioner.icca_regions(part).items()
             for op in extract_region(func, rname, HW).ops if op.expr.kind == "attention"]
    assert len(exprs) == len(bands)
    for expr in exprs:
        assert len(expr.inputs) == 3
    found = [band_of_predicate(e.body["args"][0]["args"][0], seq_len, seq_len) for e in exprs]
    assert sorted(((b.upper, b.lower) for b in found), key=repr) == sorted(bands, key=repr)


def test_zoo_mask_in_the_graph_equals_the_sampler():
    from tvm.relax.frontend import nn

    from tvm_icca.workloads._layers import causal_mask

    class Mask(nn.Module):
        def forward(self, x: nn.Tensor):
            return x + causal_mask(12, "float32", 5)

    mod, _ = Mask().export_tvm(spec={"forward": {"x": nn.spec.Tensor((12, 12), "float32")}})
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    got = vm["forward"](tvm.runtime.tensor(np.zeros((12, 12), np.float32))).numpy()
    assert np.array_equal(got, causal_mask_sampler(12, "float32", 5)(None))


def test_host_masks_are_the_same_model():
    """tvm_icca.testing.host_masks: the zoo model with its masks lifted to parameters computes
    what the model with in-graph masks computes (TVM's llvm build of both)."""
    from tvm_icca.testing.device_runs import reference_build, run_outputs
    from tvm_icca.testing.host_masks import with_host_masks

    w = get_workload("gemma2-27b", tiny=True, phase="prefill", seq_len=12, num_layers=2)
    lifted = with_host_masks(w)
    masks = [p for p in lifted.params if p.kind == "mask"]
    assert sorted(p.name for p in masks) == ["causal_mask", "sliding_mask"]
    values = dict(zip((p.name for p in w.params), w.random_args(seed=1)))
    values.update({p.name: p.sample(np.random.default_rng(0)) for p in masks})
    got = run_outputs(reference_build(lifted.mod), [tvm.runtime.tensor(values[p.name])
                                                   for p in lifted.params])
    want = run_outputs(reference_build(w.mod), [tvm.runtime.tensor(values[p.name])
                                               for p in w.params])
    for g, x in zip(got, want):
        assert np.array_equal(g.numpy(), x.numpy())
