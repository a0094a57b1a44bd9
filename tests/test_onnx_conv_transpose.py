"""ConvTranspose's ``output_shape`` and ``auto_pad`` as explicit pads before TVM's importer
(:mod:`tvm_icca.frontend.onnx_conv_transpose`): the rewritten node means what the original
does to ``onnx.reference.ReferenceEvaluator``, and what TVM cannot express is refused by name."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tvm_icca
from tvm_icca.frontend.onnx_conv_transpose import explicit_conv_transpose_pads, spec_pads


def _model(attrs: dict, x_shape=(1, 2, 3, 3), w_shape=(2, 3, 3, 3)) -> onnx.ModelProto:
    node = helper.make_node("ConvTranspose", ["X", "W"], ["Y"], name="up", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape)),
         helper.make_tensor_value_info("W", TensorProto.FLOAT, list(w_shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None] * len(x_shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def _attrs(model: onnx.ModelProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}


def test_spec_pads_follow_the_specification():
    # in 3, stride 3, kernel 3: natural size 9; 10 asks one more row, at the end unless SAME_UPPER
    assert spec_pads([3], [3], [3], [1], [0], [10], same_upper=False) == [0, -1]
    assert spec_pads([3], [3], [3], [1], [0], [10], same_upper=True) == [-1, 0]
    assert spec_pads([3], [3], [2], [1], [0], [6], same_upper=True) == [0, 1]  # SAME_UPPER: end
    assert spec_pads([3], [3], [2], [1], [0], [6], same_upper=False) == [1, 0]


@pytest.mark.parametrize("attrs", [
    {"strides": [3, 2], "output_shape": [10, 8]},  # one row beyond the kernel: output_padding
    {"strides": [2, 2], "output_shape": [5, 6], "auto_pad": "SAME_UPPER"},  # a crop
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"strides": [2, 3], "auto_pad": "SAME_LOWER", "dilations": [2, 1]},
    {"strides": [2, 2], "auto_pad": "SAME_LOWER", "kernel_shape": [1, 1]},  # a negative end pad
])
def test_explicit_pads_mean_the_same(attrs):
    w_shape = (2, 3, *attrs.get("kernel_shape", [3, 3]))
    model = _model(attrs, w_shape=w_shape)
    rewritten = explicit_conv_transpose_pads(model)
    assert rewritten is not model and len(_attrs(model)) == len(attrs)  # the caller's is kept
    assert set(_attrs(rewritten)) & {"output_shape", "auto_pad"} == set()
    assert min(_attrs(rewritten)["pads"]) >= 0
    rng = np.random.default_rng(0)
    feeds = {"X": rng.standard_normal((1, 2, 3, 3)).astype(np.float32),
             "W": rng.standard_normal(w_shape).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = ReferenceEvaluator(rewritten).run(None, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_nodes_without_them_are_left_alone():
    model = _model({"strides": [2, 2], "pads": [1, 1, 1, 1], "auto_pad": "NOTSET"})
    assert explicit_conv_transpose_pads(model) is model


@pytest.mark.parametrize("attrs,said", [
    ({"strides": [3, 2], "output_shape": [12, 8]}, "output_shape [12, 8] asks for the pads [-1, 0, -2, -1]"),
    ({"strides": [2, 2], "kernel_shape": [1, 1], "auto_pad": "SAME_UPPER"},
     "auto_pad SAME_UPPER asks for the pads [-1, -1, 0, 0]"),
    ({"strides": [2, 2], "output_shape": [1, 3, 6, 6]}, "output_shape [1, 3, 6, 6] has 4 extents"),
    ({"strides": [3, 2], "output_shape": [10, 9], "output_padding": [0, 1]},
     "output_padding [1, 2] that extends the output that far is not below the strides [3, 2]"),
])
def test_what_tvm_cannot_express_is_refused(attrs, said):
    w_shape = (2, 3, *attrs.get("kernel_shape", [3, 3]))
    with pytest.raises(tvm_icca.ModelImportError, match="ConvTranspose node 'up'") as err:
        explicit_conv_transpose_pads(_model(attrs, w_shape=w_shape))
    assert said in str(err.value)


def test_load_onnx_needs_the_input_shape_for_output_shape():
    model = _model({"strides": [3, 2], "output_shape": [10, 8]}, x_shape=("n", 2, "h", 3))
    with pytest.raises(tvm_icca.ModelImportError, match="needs the input's spatial shape"):
        tvm_icca.load_onnx(model, allow_symbolic=True)
    with contextlib.redirect_stderr(io.StringIO()):
        mod = tvm_icca.load_onnx(model, shape_dict={"X": [1, 2, 3, 3]})
    assert [int(d) for d in mod["main"].ret_ty.shape.values] == [1, 3, 10, 8]
