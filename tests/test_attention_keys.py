"""A fused attention operator too large for the chip, cut into pieces (tvm_icca.split):
along its keys, per key block and the online-softmax combine (tvm_icca.split.attention_keys);
along batch, heads or queries, attention per piece. The pieces run on the functional device
and are compared with numpy's three-step attention (``attention_reference``)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import OpProgram, TensorDecl
from runtime_sim.functional.device import SimulatedDevice
from tvm_icca.lower.region import PendingOp, RegionOps
from tvm_icca.split.attention_keys import attention_key_blocks, key_axis
from tvm_icca.split.pieces import why_not_splittable
from tvm_icca.split.region_split import SplitChoice, split_region
from tvm_icca.testing.exprs import attention_expr, attention_reference

HW = small_chip(4)


def _region(expr: TensorExpr) -> RegionOps:
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype) for t in expr.inputs)
    op = PendingOp("attn", expr, tuple(t.name for t in expr.inputs), expr.output.name, "attention")
    return RegionOps("r0", decls, (op,), (expr.output.name,), {})


def _run(region: RegionOps, args: list[np.ndarray]) -> np.ndarray:
    """The region on the functional device, each operator on two cores along its first
    axis that has two or more points (the device's own partitioning is exercised)."""
    ops = []
    for op in region.ops:
        axis = next((a.name for a in op.expr.axes if a.extent >= 2 and not a.reduce), None)
        split = {axis: 2} if axis is not None else {}
        plan = ExecutionPlan(split, tuple({} for _ in op.expr.tensors))
        ops.append(OpProgram(op.name, op.expr, plan, op.input_names, op.output_name, label=op.label))
    (out,) = SimulatedDevice().run(region.program(HW, ops), args)
    return out


def _case(**kwargs) -> tuple[TensorExpr, list[np.ndarray], np.ndarray]:
    expr = attention_expr(6, 10, 4, batch=(2,), **kwargs)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(t.shape).astype(t.dtype) for t in expr.inputs]
    mask = args[3] if kwargs.get("mask") else None
    if mask is not None:
        args[3] = np.where(rng.random(mask.shape) < 0.3, np.float32(-1e9), mask).astype(np.float32)
    ref = attention_reference(*args[:3], mask=args[3] if mask is not None else None,
                              softcap=kwargs.get("softcap"))
    return expr, args, ref


@pytest.mark.parametrize("pieces", [2, 3])
@pytest.mark.parametrize("kwargs", [{}, {"mask": True, "softcap": 20.0}])
def test_cut_along_keys_is_attention_per_block_and_the_online_combine(pieces, kwargs) -> None:
    expr, args, ref = _case(**kwargs)
    assert key_axis(expr) == "j" and why_not_splittable(expr, "j") is None
    split = split_region(_region(expr), [SplitChoice(0, "j", pieces)])
    labels = [op.label for op in split.ops]
    assert sum(op.expr.kind == "attention" for op in split.ops) == pieces
    assert sum(label.endswith("maximum") and "block" in label for label in labels) == pieces
    assert labels[-1] == f"attention (online softmax of {pieces} blocks)"
    assert split.ops[-1].output_name == expr.output.name
    np.testing.assert_allclose(_run(split, args), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", ["b0", "i", "d"])
def test_cut_along_batch_queries_or_features_is_attention_per_piece(axis) -> None:
    expr, args, ref = _case(mask=True)
    split = split_region(_region(expr), [SplitChoice(0, axis, 2)])
    kinds = [op.expr.kind for op in split.ops]
    assert kinds == ["attention", "attention", "elementwise"]  # the two pieces and their concat
    assert all(op.expr.combiner == "softmax" for op in split.ops[:2])
    np.testing.assert_allclose(_run(split, args), ref, rtol=1e-5, atol=1e-6)


def test_key_blocks_refuse_other_operators() -> None:
    from tvm_icca.testing.exprs import matmul

    op = PendingOp("mm", matmul(4, 4, 4), ("A", "B"), "C")
    with pytest.raises(ValueError, match="not a fused attention"):
        attention_key_blocks(op, [(0, 2), (2, 2)])
