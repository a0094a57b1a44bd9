"""tvm_icca.lower.te_axes: the axes of one TE conversion and its affine index maps (T10 §5).

The conversions built on these (conv2d's compound indices, grouped convolution, reshapes over
their atoms) are tested end to end in test_tensor_expr.py and test_conv_ops.py; here the index
arithmetic is checked on hand-written TIR expressions.
"""

from __future__ import annotations

import pytest

tvm = pytest.importorskip("tvm")
from tvm import te, tirx  # noqa: E402

from runtime_sim.contract.errors import UnsupportedOperatorError  # noqa: E402
from runtime_sim.contract.expr import AffineIndex, Axis  # noqa: E402
from tvm_icca.lower.te_axes import AxisSpace  # noqa: E402
from tvm_icca.ops.te_capture import ffi_key  # noqa: E402


def _c(v: int) -> tirx.IntImm:
    return tirx.const(v, "int64")


def test_axis_names_are_suffixed_where_they_clash():
    space = AxisSpace()
    space.new_axis("h", 8, False, False)
    space.new_axis("h", 3, True, True)
    space.new_axis("", 2, False, False)
    assert space.axes == [Axis("h", 8, False), Axis("ax", 2, False)]
    assert space.local_axes == [Axis("h_1", 3, True)]


def test_compound_index_is_a_sum_of_axes_times_constants():
    space = AxisSpace()
    kh = space.new_axis("kh", 3, True, False)
    h = space.new_axis("h", 8, False, False)
    # terms in axis creation order, whatever order the expression names them in
    assert space.affine(h * _c(2) + kh - _c(1)) == AffineIndex((("kh", 1), ("h", 2)), -1)
    # a div/mod the simplifier can remove (the axis range is known) is affine too
    assert space.affine(tirx.floordiv(h, _c(8))) == AffineIndex((), 0)
    with pytest.raises(UnsupportedOperatorError):
        space.affine(tirx.floordiv(h, _c(2)))


def test_subst_rewrites_te_variables_over_the_axes():
    space = AxisSpace()
    x = space.new_axis("x", 4, False, False)
    v = tirx.Var("v", "int64")
    index = space.subst(v * _c(3) + _c(1), {ffi_key(v): x})
    assert space.affine(index) == AffineIndex((("x", 3),), 1)
    with pytest.raises(UnsupportedOperatorError):
        space.subst(tirx.Var("unbound", "int64"), {})


def test_nonneg_form_of_a_bounds_check():
    space = AxisSpace()
    h = space.new_axis("h", 8, False, False)
    v = tirx.Var("v", "int64")
    env = {ffi_key(v): h}
    # h - 1 >= 0, as padding's guard writes it
    assert space.nonneg_form(tirx.GE(v - _c(1), _c(0)), env) == AffineIndex((("h", 1),), -1)
    # v < 8 holds everywhere in h's range
    assert space.nonneg_form(tirx.LT(v, _c(8)), env) == "true"


def test_grouped_output_axis_is_split_by_its_divisor():
    space = AxisSpace()
    out = te.compute((6,), lambda ff: tirx.floordiv(ff, 3).astype("float32"))
    space.spatial_axes(list(out.op.axis), (6,), out.op.body[0])
    assert space.axes == [Axis("g", 2, False), Axis("f", 3, False)]
    assert space.out_indices == [AffineIndex((("g", 3), ("f", 1)), 0)]


def test_merged_output_has_one_axis_per_atom():
    space = AxisSpace()
    index = space.merged_output(["i0", "i1"], (6, 4), [(2, 3), (4,)])
    assert [a.name for a in space.axes] == ["i0_0", "i0_1", "i1"]
    assert space.out_indices == [AffineIndex((("i0_0", 3), ("i0_1", 1)), 0),
                                 AffineIndex.of_axis("i1")]
    assert len(index) == 2
