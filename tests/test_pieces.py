"""Sub-operators, combines and concats (tvm_icca.split.pieces) on the functional device:
each split of an operator computes what the operator computes (numpy), and a viewed input is
one checked block of its tensor."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.expr import TensorView
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl
from runtime_sim.contract.validation import validate_program
from runtime_sim.functional.device import SimulatedDevice
from tvm_icca.plan_search import plan_operator
from tvm_icca.split.pieces import (
    combine_expression,
    concat_expression,
    split_blocks,
    sub_expression,
    why_not_splittable,
)
from tvm_icca.testing import exprs

HW = small_chip(16)
RNG = np.random.default_rng(7)


def _split_program(expr, axis: str, pieces: int) -> DeviceProgram:
    """``expr`` as ``pieces`` sub-operators along ``axis`` and the operator that joins them."""
    ops, names = [], []
    for k, (start, length) in enumerate(split_blocks(expr.extent(axis), pieces)):
        sub = sub_expression(expr, axis, start, length, f"part{k}")
        names.append(((sub.output.name, start, length), sub))
        ins = tuple(a.name for a in sub.inputs)
        ops.append(OpProgram(f"op.p{k}", sub, plan_operator(sub, HW).plan, ins, sub.output.name))
    if any(a.name == axis and a.reduce for a in expr.axes):
        join = combine_expression(expr, [n for (n, _, _), _ in names])
    else:
        dim = next(d for d, ix in enumerate(expr.output.indices) if axis in ix.axes)
        join = concat_expression(expr.output, dim, [n for n, _ in names])
    ops.append(OpProgram("op.join", join, plan_operator(join, HW).plan,
                         tuple(a.name for a in join.inputs), expr.output.name))
    decls = tuple(TensorDecl(a.name, a.shape, a.dtype) for a in expr.inputs)
    return DeviceProgram("r", HW.to_dict(), decls, (expr.output.name,), tuple(ops))


def _matmul_bias_relu_reference(a, b, bias):
    return np.maximum(a.astype(np.float64) @ b + bias, 0)


@pytest.mark.parametrize("axis, pieces", [("k", 3), ("k", 5), ("n", 2), ("m", 4)])
def test_split_matmul_bias_relu_equals_the_operator(axis, pieces):
    """A reduction split adds the bias and applies the ReLU once, to the combined sum (a
    per-piece ReLU would be wrong); a spatial split joins the column or row blocks."""
    expr = exprs.matmul_bias_relu(12, 40, 20)
    args = [RNG.standard_normal(a.shape).astype(np.float32) for a in expr.inputs]
    program = _split_program(expr, axis, pieces)
    validate_program(program)
    (out,) = SimulatedDevice().run(program, args)
    np.testing.assert_allclose(out, _matmul_bias_relu_reference(*args), rtol=1e-4, atol=1e-4)


def test_views_count_only_their_block():
    expr = exprs.matmul(8, 64, 8)
    sub = sub_expression(expr, "k", 16, 16, "part")
    a, b = sub.inputs
    assert a.view == TensorView((0, 16), (8, 64)) and a.shape == (8, 16)
    assert b.view == TensorView((16, 0), (64, 8)) and b.shape == (16, 8)
    assert sub.structure_key() != sub_expression(expr, "k", 32, 16, "part").structure_key()
    assert sub.structure_key(views=False) == sub_expression(expr, "k", 32, 16, "part").structure_key(views=False)


def test_a_view_outside_its_tensor_is_refused():
    expr = exprs.matmul(8, 64, 8)
    program = _split_program(expr, "k", 2)
    first = program.ops[0]
    a = first.expr.inputs[0]
    bad = dataclasses.replace(a, view=TensorView((0, 40), a.view.base_shape))
    broken = dataclasses.replace(first, expr=dataclasses.replace(first.expr, inputs=(bad,) + first.expr.inputs[1:]))
    with pytest.raises(DeviceProgramError, match="outside the tensor"):
        validate_program(dataclasses.replace(program, ops=(broken,) + program.ops[1:]))
    with pytest.raises(DeviceProgramError, match="version 5"):
        validate_program(dataclasses.replace(program, version=4))


def test_compound_and_core_local_axes_are_not_split():
    conv = exprs.conv2d(1, 4, 8, 8, 4, 3, 3, stride=1, pad=1)
    assert "compound" in why_not_splittable(conv, conv.axes[2].name)
    softmax = exprs.softmax(4, 16)
    assert "top-level" in why_not_splittable(softmax, softmax.local_axes[0].name)


def test_blocks_cover_the_axis():
    for extent, pieces in [(10, 3), (7, 7), (32, 4)]:
        blocks = split_blocks(extent, pieces)
        assert sum(n for _, n in blocks) == extent and blocks[0][0] == 0
        assert all(s + n == blocks[i + 1][0] for i, (s, n) in enumerate(blocks[:-1]))
