"""ONNX import: every failure is one clear ModelImportError; valid models import and run."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
import tvm.testing
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from tvm import relax

import tvm_icca
from tvm_icca.testing import onnx_models
from tvm_icca.testing.device_runs import reference_build


def _model(nodes, inputs, outputs, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _relu_model(shape=(2, 4)) -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", shape)], [_vi("y", shape)])


def _import_error(source, **kwargs) -> tvm_icca.ModelImportError:
    with pytest.raises(tvm_icca.ModelImportError) as info:
        tvm_icca.load_onnx(source, **kwargs)
    err = info.value
    # One clear message, no chained TVM/protobuf traceback.
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)
    assert str(err).startswith("cannot import")
    assert isinstance(err, tvm_icca.IccaError)
    return err


# -- failures ------------------------------------------------------------------------------
def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.onnx"
    err = _import_error(path)
    assert str(path) in str(err) and "no such file" in str(err)


def test_directory(tmp_path: Path) -> None:
    assert "directory" in str(_import_error(tmp_path))


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    assert "is empty" in str(_import_error(str(path)))


@pytest.mark.parametrize("seed", range(5))
def test_garbage_bytes(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "garbage.onnx"
    path.write_bytes(np.random.default_rng(seed).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    err = _import_error(path)
    assert "not a valid ONNX protobuf" in str(err) or "onnx.checker" in str(err)


def test_text_file_is_not_onnx(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_text("this is not a model\n")
    _import_error(path)


def test_invalid_model_rejected_by_checker() -> None:
    # The node reads a tensor nobody defines.
    model = _model([helper.make_node("Relu", ["missing"], ["y"])], [_vi("x", [2])], [_vi("y", [2])])
    err = _import_error(model)
    assert "onnx.checker" in str(err)


def test_invalid_model_bytes_rejected_by_checker() -> None:
    model = _model([helper.make_node("NoSuchOp", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])])
    assert "onnx.checker" in str(_import_error(model.SerializeToString()))


def test_op_unknown_to_tvm_importer() -> None:
    # Det is a valid ONNX op (the checker accepts it) that TVM's importer does not convert.
    model = _model([helper.make_node("Det", ["x"], ["y"])], [_vi("x", [3, 3])], [_vi("y", [])])
    onnx.checker.check_model(model)
    err = _import_error(model)
    assert "does not support" in str(err) and "Det" in str(err)


def _gpt2_scalar_fill() -> onnx.ModelProto:
    """GPT-2's export: a scalar from ``ConstantOfShape`` of an empty shape (rank 0), used by an
    Add and a masked fill (Where)."""
    empty = helper.make_tensor("empty", TensorProto.INT64, [0], [])
    nodes = [helper.make_node("Constant", [], ["shape"], value=empty, name="/h.0/attn/Constant"),
             helper.make_node("ConstantOfShape", ["shape"], ["fill"], name="/h.0/attn/ConstantOfShape",
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [-1e4])),
             helper.make_node("Greater", ["x", "zero"], ["keep"], name="/h.0/attn/Greater"),
             helper.make_node("Where", ["keep", "x", "fill"], ["masked"], name="/h.0/attn/Where"),
             helper.make_node("Add", ["masked", "fill"], ["y"], name="/h.0/attn/Add")]
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    graph = helper.make_graph(nodes, "g", [_vi("x", [2, 4])], [_vi("y", [2, 4])], [zero])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_scalar_constant_of_shape_fails_in_tvm_unfolded_and_imports_folded() -> None:
    model = _gpt2_scalar_fill()
    onnx.checker.check_model(model)
    err = _import_error(model, fold_constants=False)
    # the failing node by its name and op type, with TVM's first line, in one short paragraph
    assert "node '/h.0/attn/ConstantOfShape' (ConstantOfShape)" in str(err)
    assert "broadcast_to" in str(err) and "\n" not in str(err)
    mod = tvm_icca.load_onnx(model)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    vm = relax.VirtualMachine(reference_build(mod), tvm.cpu())
    tvm.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), want, rtol=1e-6)


def test_failing_node_without_a_name_is_named_by_its_outputs() -> None:
    model = _gpt2_scalar_fill()
    for node in model.graph.node:
        node.name = ""
    err = _import_error(model, fold_constants=False)
    assert "unnamed ConstantOfShape node computing 'fill'" in str(err)


def test_wrong_source_type() -> None:
    err = _import_error(12345)
    assert "int" in str(err)


# -- successes -----------------------------------------------------------------------------
def test_load_from_path_bytes_and_proto(tmp_path: Path) -> None:
    model = _relu_model()
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    for source in (path, str(path), model.SerializeToString(), model):
        mod = tvm_icca.load_onnx(source)
        assert isinstance(mod, tvm.IRModule) and "main" in [gv.name_hint for gv in mod.get_global_vars()]


def test_shape_dict_makes_symbolic_inputs_static() -> None:
    model = _relu_model(shape=("N", 4))
    dynamic = tvm_icca.load_onnx(model, allow_symbolic=True)
    static = tvm_icca.load_onnx(model, {"x": (3, 4)})
    assert not isinstance(dynamic["main"].params[0].ty.shape.values[0], tvm.tirx.IntImm)
    assert [int(d) for d in static["main"].params[0].ty.shape.values] == [3, 4]
    assert tvm_icca.host_ops(tvm_icca.partition_for_icca(dynamic)) == {"relax.nn.relu": 1}
    assert tvm_icca.host_ops(tvm_icca.partition_for_icca(static)) == {}


def test_imported_mlp_is_partitioned_with_fused_epilogues() -> None:
    case = onnx_models.mlp()
    part = tvm_icca.partition_for_icca(tvm_icca.load_onnx(case.model))
    report = tvm_icca.partition_report(part)
    assert report["host_ops"] == {}
    (region,) = report["regions"]
    assert region["composites"] == ["icca.matmul_bias_relu", "icca.matmul_bias_relu",
                                    "icca.matmul_bias", "icca.softmax"]


# -- end to end (real compiler and device) -------------------------------------------------
@pytest.mark.parametrize("make_case", [onnx_models.mlp, onnx_models.residual_cnn,
                                       onnx_models.transformer_encoder_layer],
                         ids=["mlp", "residual_cnn", "encoder_layer"])
def test_compile_onnx_matches_numpy_reference(make_case) -> None:
    case = make_case()
    ex = tvm_icca.compile_onnx(case.model, hw=tvm_icca.small_chip(16))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(case.inputs[name]) for name in case.inputs])
    outs = [out] if hasattr(out, "numpy") else list(out)
    for got, ref in zip(outs, case.reference(case.inputs), strict=True):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-3, atol=1e-4)


def test_symbolic_inputs_are_refused_with_the_binding_to_pass() -> None:
    """An exporter's dynamic batch axis never compiles silently to host-only code: the one
    error names the input, its dimensions and the shape_dict / --shape to pass."""
    model = _relu_model(shape=("N", 4))
    with pytest.raises(tvm_icca.ModelImportError) as info:
        tvm_icca.load_onnx(model)
    text = str(info.value)
    assert "'x' [N, 4]" in text and "shape_dict={'x': [1, 4]}" in text and "--shape x=1,4" in text
    # the suggested binding works and puts the op on the chip
    mod = tvm_icca.load_onnx(model, {"x": [1, 4]})
    assert tvm_icca.host_ops(tvm_icca.partition_for_icca(mod)) == {}


@pytest.mark.parametrize("shape_dict,words", [
    ({"y": [3, 4]}, "not an input of the model (inputs: x)"),
    ({"x": [3]}, "1 dimension(s), the input has 2"),
    ({"x": [3, 5]}, "dimension 1 is fixed to 4"),
])
def test_a_shape_dict_that_binds_no_input_is_an_error(shape_dict, words) -> None:
    with pytest.raises(tvm_icca.ModelImportError, match=re.escape(words)):
        tvm_icca.load_onnx(_relu_model(shape=("N", 4)), shape_dict)
