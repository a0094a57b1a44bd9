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
