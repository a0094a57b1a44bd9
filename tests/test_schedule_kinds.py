"""schedules.kind_of: which template computes an operator, on hand-built tensor expressions.

The end-to-end choice (Relax op -> TE -> TensorExpr -> kind) is tested in test_tensor_expr.py
(``test_kind``); here the rules themselves, without TVM.
"""

from __future__ import annotations

import dataclasses

import pytest

from schedules import kind_of, template_kinds
from schedules.kinds import _KIND_RANK


def test_every_ranked_kind_has_a_template():
    assert {kind for kind, _ in _KIND_RANK} <= set(template_kinds())


@pytest.mark.parametrize("names,kind", [
    (("relax.nn.conv2d", "relax.add", "relax.nn.relu"), "conv2d"),
    (("relax.permute_dims", "relax.matmul"), "matmul"),
    (("relax.nn.log_softmax",), "softmax"),
    (("relax.nn.rms_norm",), "layer_norm"),
    (("relax.mean",), "reduce"),
    (("relax.add", "relax.nn.relu"), "elementwise"),
    ((), "elementwise"),
])
def test_kind_from_op_names_alone(names, kind):
    assert kind_of(names) == kind


def test_highest_ranked_fitting_op_decides(exprs):
    conv = exprs.conv2d(1, 2, 6, 6, 3, 3, 3)
    assert kind_of(("relax.nn.conv2d", "relax.matmul"), conv) == "conv2d"
    mm = exprs.matmul_bias_relu(4, 8, 5)
    assert kind_of(("relax.matmul", "relax.add", "relax.nn.relu", "relax.sum"), mm) == "matmul"
    assert kind_of(("relax.nn.softmax",), exprs.softmax(4, 6)) == "softmax"
    assert kind_of(("relax.nn.layer_norm",), exprs.layer_norm(4, 6)) == "layer_norm"
    assert kind_of(("relax.mean",), exprs.row_sum(4, 6, mean=True)) == "reduce"


def test_op_whose_template_does_not_fit_falls_through(exprs):
    # A matmul whose sum ended up core-local (inside a softmax) is not a GEMM ...
    assert kind_of(("relax.matmul", "relax.nn.softmax"), exprs.softmax(4, 6)) == "softmax"
    # ... and with nothing else listed the structure decides: a core-local reduction.
    assert kind_of(("relax.matmul",), exprs.softmax(4, 6)) == "reduce"
    # A 'reduce' op whose expression has no reduction left is elementwise.
    assert kind_of(("relax.sum",), exprs.bias_add(4, 6)) == "elementwise"


def test_structural_kind(exprs):
    assert kind_of((), exprs.matmul(4, 8, 5)) == "matmul"
    assert kind_of((), exprs.matmul(4, 8, 5, transpose_b=True, batch=2)) == "matmul"
    assert kind_of((), exprs.conv2d(1, 2, 6, 6, 3, 3, 3, stride=2, pad=1)) == "conv2d"
    assert kind_of((), exprs.row_sum(4, 6)) == "reduce"
    assert kind_of((), exprs.layer_norm(4, 6)) == "reduce"
    assert kind_of((), exprs.bias_add(4, 6)) == "elementwise"


def test_product_of_loads_through_casts_is_a_contraction(exprs):
    mm = exprs.matmul(4, 8, 5, dtype="float16")
    cast = {"op": "mul", "args": [{"op": "cast", "dtype": "float32", "args": [a]} for a in mm.body["args"]]}
    assert kind_of((), dataclasses.replace(mm, body=cast)) == "matmul"
    # three factors, or a sum, are not a GEMM: a generic reduction
    triple = {"op": "mul", "args": [mm.body, mm.body["args"][0]]}
    assert kind_of(("relax.matmul",), dataclasses.replace(mm, body=triple)) == "reduce"
    added = {"op": "add", "args": mm.body["args"]}
    assert kind_of((), dataclasses.replace(mm, body=added)) == "reduce"
