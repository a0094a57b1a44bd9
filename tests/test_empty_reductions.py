"""Reductions over a zero-length axis give their identity (numpy, onnx.reference), not garbage."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.frontend.empty_reductions import FoldEmptyReductions
from tvm_icca.testing.relax_functions import relax_function


def _module(shapes, body) -> tvm.IRModule:
    return tvm.IRModule({"main": relax_function(shapes, body).with_attr("global_symbol", "main")})


def _run(mod: tvm.IRModule, *args: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm_icca.compile(mod, small_chip(16)), tvm.cpu())
    return vm["main"](*(tvm.runtime.tensor(a) for a in args)).numpy()


def test_matmul_with_an_empty_reduction_axis_is_zeros() -> None:
    a, b = np.ones((4, 0), np.float32), np.ones((0, 5), np.float32)
    got = _run(_module([(4, 0), (0, 5)], relax.op.matmul), a, b)
    np.testing.assert_array_equal(got, a @ b)
    assert got.shape == (4, 5) and not got.any()


@pytest.mark.parametrize("op,numpy_op", [
    (relax.op.sum, np.sum), (relax.op.prod, np.prod), (relax.op.max, None),
    (relax.op.min, None), (relax.op.mean, None)])
def test_reductions_over_nothing_give_their_identity(op, numpy_op) -> None:
    x = np.zeros((3, 0, 2), np.float32)
    got = _run(_module([(3, 0, 2)], lambda t: op(t, axis=[1])), x)
    want = {relax.op.max: -np.inf, relax.op.min: np.inf, relax.op.mean: np.nan}.get(op)
    expected = numpy_op(x, axis=1) if numpy_op is not None else np.full((3, 2), want, np.float32)
    np.testing.assert_array_equal(got, expected)


def test_non_empty_reductions_are_untouched() -> None:
    mod = _module([(3, 4)], lambda t: relax.op.sum(t, axis=[1]))
    assert FoldEmptyReductions()(mod)["main"].same_as(mod["main"])


def test_onnx_empty_set_reductions_match_the_reference() -> None:
    for op, name in (("ReduceSum", "sum"), ("ReduceMax", "max"), ("ReduceMin", "min"),
                     ("ReduceProd", "prod")):
        axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
        graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 0, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 4])],
                                  initializer=[axes])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        onnx.checker.check_model(model)
        x = np.zeros((2, 0, 4), np.float32)
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        got = _run(tvm_icca.load_onnx(model, {"x": [2, 0, 4]}), x)
        np.testing.assert_array_equal(got, want, err_msg=op)


def _onnx(nodes, inputs, output_shape, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "empty", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)], list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


_AXES = helper.make_tensor("axes", TensorProto.INT64, [1], [1])

#: ONNX models whose empty axis is declared in the model itself (no shape_dict): TVM's
#: importer read the 0 as "not given", made it a symbol, and the host returned garbage.
EMPTY_IN_THE_MODEL = {
    **{op: (_onnx([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], [("x", [2, 0, 3])],
                  [2, 3], [_AXES]), [np.ones((2, 0, 3), np.float32)])
       for op in ("ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                  "ReduceLogSumExp")},
    "Gemm": (_onnx([helper.make_node("Gemm", ["a", "b", "c"], ["y"])],
                   [("a", [3, 0]), ("b", [0, 4]), ("c", [4])], [3, 4]),
             [np.ones((3, 0), np.float32), np.ones((0, 4), np.float32),
              np.arange(4, dtype=np.float32)]),
    "batched MatMul": (_onnx([helper.make_node("MatMul", ["a", "b"], ["y"])],
                             [("a", [2, 3, 0]), ("b", [2, 0, 4])], [2, 3, 4]),
                       [np.ones((2, 3, 0), np.float32), np.ones((2, 0, 4), np.float32)]),
}


@pytest.mark.parametrize("name", list(EMPTY_IN_THE_MODEL))
def test_an_empty_axis_declared_in_the_onnx_model_gives_the_reference_answer(name) -> None:
    model, args = EMPTY_IN_THE_MODEL[name]
    (want,) = ReferenceEvaluator(model).run(None, {i.name: a for i, a in zip(model.graph.input, args)})
    got = _run(tvm_icca.load_onnx(model), *args)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True, err_msg=name)


def test_a_reduction_over_nothing_that_is_not_folded_is_refused_clearly() -> None:
    """An ONNX Einsum (a TIR function of TVM's importer) or an argmax over an empty axis has
    no folded identity: one clear error, never TVM's uninitialized memory."""
    einsum = _onnx([helper.make_node("Einsum", ["a", "b"], ["y"], equation="ik,kj->ij")],
                   [("a", [3, 0]), ("b", [0, 4])], [3, 4])
    with pytest.raises(tvm_icca.UnsupportedOperatorError,
                       match=r"TIR function 'einsum'.*\[3, 0\].*\[3, 4\]"):
        tvm_icca.compile(tvm_icca.load_onnx(einsum), small_chip(16))
    argmax = _module([(2, 0)], lambda t: relax.op.argmax(t, axis=1))
    with pytest.raises(tvm_icca.UnsupportedOperatorError, match=r"relax.argmax reads"):
        tvm_icca.compile(argmax, small_chip(16))


def test_ops_that_set_every_output_element_pass_with_an_empty_input() -> None:
    a, b = np.ones((2, 0), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    got = _run(_module([(2, 0), (2, 3)], lambda x, y: relax.op.concat([x, y], axis=1)), a, b)
    np.testing.assert_array_equal(got, np.concatenate([a, b], axis=1))
