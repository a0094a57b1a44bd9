"""ONNX graph preparation: folded graphs compute what the original graphs compute
(``onnx.reference.ReferenceEvaluator`` on both, and TVM's CPU build of the import), shape
computations become constants, and what must not fold stays."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
import tvm.testing
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tvm import relax

import tvm_icca
from tvm_icca.frontend.onnx_prepare import FoldStats, prepare_onnx
from tvm_icca.testing.device_runs import reference_build


def _model(nodes, inputs, outputs, initializers=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _vi(name: str, shape, elem=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=f"const_{name}",
                            value=numpy_helper.from_array(np.asarray(value), name))


def _producer(model: onnx.ModelProto, tensor: str) -> onnx.NodeProto:
    (node,) = [n for n in model.graph.node if tensor in n.output]
    return node


def _attention_heads(batch, seq: int = 8, heads: int = 2, head_dim: int = 4) -> onnx.ModelProto:
    """Self-attention as PyTorch exports it: the head split is computed from ``Shape`` of the
    projection (Shape -> Gather -> Unsqueeze -> Concat -> Reshape), the merge from ``Shape`` of
    the input, and the scores are masked with a causal ``Where``."""
    d = heads * head_dim
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array((rng.standard_normal((d, 3 * d)) / 4).astype(np.float32), "w_qkv")
    mask = numpy_helper.from_array(np.tril(np.ones((seq, seq), bool)), "causal")
    nodes = [
        _const("split", [d, d, d]), _const("i0", np.int64(0)), _const("i1", np.int64(1)),
        helper.make_node("MatMul", ["x", "w_qkv"], ["qkv"], name="/attn/qkv"),
        helper.make_node("Split", ["qkv", "split"], ["q", "k", "v"], axis=-1, name="/attn/Split"),
        _const("axis0", [0]), _const("heads", [heads]), _const("head_dim", [head_dim]),
        helper.make_node("Shape", ["q"], ["q_shape"], name="/attn/Shape"),
        helper.make_node("Gather", ["q_shape", "i0"], ["b"], axis=0, name="/attn/Gather"),
        helper.make_node("Gather", ["q_shape", "i1"], ["t"], axis=0, name="/attn/Gather_1"),
        helper.make_node("Unsqueeze", ["b", "axis0"], ["b1"], name="/attn/Unsqueeze"),
        helper.make_node("Unsqueeze", ["t", "axis0"], ["t1"], name="/attn/Unsqueeze_1"),
        helper.make_node("Concat", ["b1", "t1", "heads", "head_dim"], ["split_shape"], axis=0,
                         name="/attn/Concat"),
    ]
    for name in ("q", "k", "v"):
        nodes += [helper.make_node("Reshape", [name, "split_shape"], [f"{name}4"], name=f"/attn/Reshape_{name}"),
                  helper.make_node("Transpose", [f"{name}4"], [f"{name}h"], perm=[0, 2, 1, 3],
                                   name=f"/attn/Transpose_{name}")]
    nodes += [
        helper.make_node("Transpose", ["kh"], ["kT"], perm=[0, 1, 3, 2], name="/attn/Transpose_kT"),
        helper.make_node("MatMul", ["qh", "kT"], ["scores"], name="/attn/MatMul"),
        # GPT-2's masked fill: a scalar from ConstantOfShape of an empty shape
        _const("empty", np.zeros((0,), np.int64)),
        helper.make_node("ConstantOfShape", ["empty"], ["neg"], name="/attn/ConstantOfShape",
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [-1e4])),
        helper.make_node("Where", ["causal", "scores", "neg"], ["masked"], name="/attn/Where"),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1, name="/attn/Softmax"),
        helper.make_node("MatMul", ["p", "vh"], ["o"], name="/attn/MatMul_1"),
        helper.make_node("Transpose", ["o"], ["o_t"], perm=[0, 2, 1, 3], name="/attn/Transpose_o"),
        helper.make_node("Shape", ["x"], ["x_shape"], name="/attn/Shape_x"),
        helper.make_node("Reshape", ["o_t", "x_shape"], ["y"], name="/attn/Reshape_out"),
    ]
    return _model(nodes, [_vi("x", [batch, seq, d])], [_vi("y", [batch, seq, d])], [weight, mask])


def test_attention_shape_chain_folds_to_constant_shapes_with_the_same_results() -> None:
    model = _attention_heads("batch")
    stats = FoldStats()
    prepared = prepare_onnx(model, {"x": [2, 8, 8]}, stats=stats)
    onnx.checker.check_model(prepared)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"  # unchanged
    for reshape in ("/attn/Reshape_q", "/attn/Reshape_k", "/attn/Reshape_v", "/attn/Reshape_out"):
        (node,) = [n for n in prepared.graph.node if n.name == reshape]
        assert _producer(prepared, node.input[1]).op_type == "Constant", reshape
    kinds = {n.op_type for n in prepared.graph.node}
    assert not kinds & {"Shape", "Gather", "Unsqueeze", "Concat", "ConstantOfShape"}
    assert stats.folded >= 8 and stats.removed_nodes > 0
    x = np.random.default_rng(1).standard_normal((2, 8, 8)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (folded,) = ReferenceEvaluator(prepared).run(None, {"x": x})
    np.testing.assert_array_equal(folded, want)

    mod = tvm_icca.load_onnx(model, {"x": [2, 8, 8]})
    vm = relax.VirtualMachine(reference_build(mod), tvm.cpu())
    tvm.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_shape_of_symbolic_dimensions_stays_and_static_parts_fold() -> None:
    model = _attention_heads("batch")
    prepared = prepare_onnx(model)  # no shape_dict: the batch stays symbolic
    ops = [n.op_type for n in prepared.graph.node]
    assert ops.count("Shape") == 2  # the batch extent is only known at run time
    # the sequence extent is static: Gather_1 -> Unsqueeze_1 folded
    assert "/attn/Unsqueeze_1" in {n.name for n in prepared.graph.node if n.op_type == "Constant"}
    x = np.random.default_rng(2).standard_normal((3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(ReferenceEvaluator(prepared).run(None, {"x": x})[0],
                                  ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_random_ops_graph_outputs_and_large_results() -> None:
    bias = numpy_helper.from_array(np.arange(64, dtype=np.float32), "bias")
    nodes = [
        helper.make_node("RandomNormal", [], ["noise"], shape=[4], name="noise"),
        _const("shape", [512, 64]),
        # 128 KiB from 256 bytes: folding would store the broadcast
        helper.make_node("Expand", ["bias", "shape"], ["wide"], name="expand"),
        helper.make_node("Add", ["x", "wide"], ["y"], name="add"),
        _const("two", np.float32(2.0)),
        helper.make_node("Mul", ["two", "two"], ["four"], name="four"),  # a graph output
    ]
    model = _model(nodes, [_vi("x", [512, 64])],
                   [_vi("y", [512, 64]), _vi("noise", [4]), _vi("four", [])], [bias])
    prepared = prepare_onnx(model)
    ops = {n.name: n.op_type for n in prepared.graph.node}
    assert ops["noise"] == "RandomNormal" and ops["expand"] == "Expand" and ops["four"] == "Constant"
    assert [o.name for o in prepared.graph.output] == ["y", "noise", "four"]
    assert numpy_helper.to_array(_producer(prepared, "four").attribute[0].t) == 4.0
    assert "wide" not in {n.output[0] for n in prepared.graph.node if n.op_type == "Constant"}
    # with a larger limit the Expand folds, and its inputs are no longer stored
    bigger = prepare_onnx(model, max_folded_bytes=1 << 20)
    assert _producer(bigger, "wide").op_type == "Constant" and not bigger.graph.initializer


def test_keep_params_in_input_leaves_initializers_as_parameters() -> None:
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [helper.make_node("Transpose", ["w"], ["wT"], name="t"),
             helper.make_node("MatMul", ["x", "wT"], ["y"], name="mm")]
    model = _model(nodes, [_vi("x", [2, 4])], [_vi("y", [2, 4])], [weight])
    kept = prepare_onnx(model, fold_initializers=False)
    assert [n.op_type for n in kept.graph.node] == ["Transpose", "MatMul"]
    assert [t.name for t in kept.graph.initializer] == ["w"]
    mod = tvm_icca.load_onnx(model, keep_params_in_input=True)
    assert [p.name for p in mod["main"].params] == ["x", "w"]
    folded = prepare_onnx(model)
    assert [n.op_type for n in folded.graph.node] == ["Constant", "MatMul"] and not folded.graph.initializer


def test_constant_attribute_forms_become_value_tensors() -> None:
    # TVM's importer reads only Constant's `value`; exporters also write value_ints/value_float.
    nodes = [helper.make_node("Constant", [], ["shape"], value_ints=[3, 2], name="shape"),
             helper.make_node("Constant", [], ["scale"], value_float=0.5, name="scale"),
             helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("Mul", ["r", "scale"], ["y"], name="mul")]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [3, 2])])
    stats = FoldStats()
    prepared = prepare_onnx(model, stats=stats)
    assert stats.normalized_constants == 2
    assert all(a.name == "value" for n in prepared.graph.node if n.op_type == "Constant" for a in n.attribute)
    with pytest.raises(tvm_icca.ModelImportError, match="node 'shape' \\(Constant\\)"):
        tvm_icca.load_onnx(model, fold_constants=False)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    vm = relax.VirtualMachine(reference_build(tvm_icca.load_onnx(model)), tvm.cpu())
    tvm.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(),
                                ReferenceEvaluator(model).run(None, {"x": x})[0])
