"""Group and instance normalization on the chip: statistics and normalization in one operator.

ONNX ``GroupNormalization`` (opset 21), ``InstanceNormalization`` and the
Reshape/InstanceNormalization/Reshape/Mul/Add that PyTorch exports for ``nn.GroupNorm`` below
opset 18, built with ``onnx.helper``, compiled for target "icca" with nothing left on the host,
against ``onnx.reference.ReferenceEvaluator``; ``relax.nn.group_norm`` with per-channel
parameters (what the importer makes of opset 18) against TVM's own llvm build.
"""

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
from runtime_sim.contract.presets import small_chip
from tvm_icca.frontend.group_norm import DecomposeGroupNorm
from tvm_icca.lower.te_to_expr import extract_op
from tvm_icca.testing.relax_functions import relax_function
from tvm_icca.testing.device_runs import reference_build

HW = small_chip(16, 16 * 1024)
RNG = np.random.default_rng(0)


def _model(nodes, shape, inits, opset) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _params(channels: int) -> dict[str, np.ndarray]:
    return {"scale": RNG.uniform(0.5, 1.5, channels).astype("float32"),
            "bias": RNG.uniform(-1, 1, channels).astype("float32")}


def group_normalization(shape, groups, eps=1e-5):
    return _model([helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"],
                                    num_groups=groups, epsilon=eps)], shape, _params(shape[1]), 21)


def instance_normalization(shape, eps=1e-5):
    return _model([helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"],
                                    epsilon=eps)], shape, _params(shape[1]), 17)


def torch_group_norm(shape, groups):
    """``nn.GroupNorm`` as torch exports it at opset 17."""
    c = shape[1]
    per_channel = (c,) + (1,) * (len(shape) - 2)
    inits = {"grouped": np.array([shape[0], groups, -1], np.int64), "back": np.array(shape, np.int64),
             "ones": np.ones(groups, "float32"), "zeros": np.zeros(groups, "float32"),
             "weight": RNG.uniform(0.5, 1.5, per_channel).astype("float32"),
             "bias": RNG.uniform(-1, 1, per_channel).astype("float32")}
    nodes = [helper.make_node("Reshape", ["x", "grouped"], ["g"]),
             helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["n"], epsilon=1e-5),
             helper.make_node("Reshape", ["n", "back"], ["r"]),
             helper.make_node("Mul", ["r", "weight"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["y"])]
    return _model(nodes, shape, inits, 17)


CASES = {
    "group_norm_audio": lambda: group_normalization([2, 8, 20], 4),
    "group_norm_per_channel": lambda: group_normalization([1, 6, 12], 6, eps=1e-3),
    "group_norm_2d": lambda: group_normalization([2, 6, 5, 4], 3),
    "group_norm_one_group": lambda: group_normalization([1, 4, 3, 5], 1),
    "instance_norm_2d": lambda: instance_normalization([2, 3, 6, 5]),
    "torch_group_norm_1d": lambda: torch_group_norm([2, 8, 15], 2),
    "torch_group_norm_2d": lambda: torch_group_norm([1, 6, 4, 5], 3),
}


@pytest.mark.parametrize("name", list(CASES))
def test_normalization_runs_on_the_chip(name: str) -> None:
    model = CASES[name]()
    onnx.checker.check_model(model)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    # a mean far from the spread (features after a conv are not centred): the two-pass
    # variance keeps the float32 digits of x - mean that the normalized values are made of
    x = (RNG.standard_normal(shape) * 2 + 30).astype("float32")
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]

    mod = tvm_icca.load_onnx(model)
    part = tvm_icca.partition_for_icca(mod, HW)
    report = tvm_icca.partition_report(part)
    assert report["host_ops"] == {}, report["host_reasons"]
    composites = [c for r in report["regions"] for c in r["composites"]]
    assert len(report["regions"]) == 1
    # mean, variance and the normalization are one operator
    assert sum(c.startswith("icca.instance_norm") for c in composites) == 1, composites
    with tvm_icca.use_hardware(HW):
        ex = tvm.compile(mod, target="icca")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    # |y| ~ 1; x - mean loses log2(30/2) bits of x's 24 in float32, on the chip and in the
    # reference alike (a different summation order), so 1e-4 absolute
    tvm.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert tvm_icca.last_run_stats()["regions_executed"] == 1


@pytest.mark.parametrize("scale,center", [(True, True), (False, True), (True, False)])
def test_decomposed_group_norm_equals_tvm_group_norm(scale: bool, center: bool) -> None:
    """``relax.nn.group_norm`` with parameters that are function inputs (the opset-18 import
    and any other frontend): the rewrite computes what TVM's own group_norm computes."""
    shapes = [(2, 6, 7), (6,), (6,)]
    func = relax_function(shapes, lambda x, g, b: relax.op.nn.group_norm(
        x, g, b, num_groups=3, channel_axis=1, axes=[2], epsilon=1e-4, center=center, scale=scale))
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    arrays = [(RNG.standard_normal(s) + 3).astype("float32") for s in shapes]
    decomposed = DecomposeGroupNorm()(mod)
    ops = set()
    relax.analysis.post_order_visit(decomposed["main"], lambda e: ops.add(e.op.name) if isinstance(
        e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    assert "relax.nn.group_norm" not in ops and "relax.variance" in ops

    def run(m, target=None):
        built = reference_build(m) if target is None else tvm.compile(m, target=target)
        vm = relax.VirtualMachine(built, tvm.cpu())
        return vm["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()

    # TVM's legalization ignores center/scale (it always applies gamma and beta): the
    # reference for the flags is numpy
    x, g, b = (a.astype(np.float64) for a in arrays)
    grouped = x.reshape(2, 3, -1)
    normed = ((grouped - grouped.mean(-1, keepdims=True))
              / np.sqrt(grouped.var(-1, keepdims=True) + 1e-4)).reshape(x.shape)
    want = normed * (g[:, None] if scale else 1) + (b[:, None] if center else 0)
    tvm.testing.assert_allclose(run(decomposed), want, rtol=1e-5, atol=1e-5)
    if scale and center:
        tvm.testing.assert_allclose(run(mod), want, rtol=1e-4, atol=1e-4)
    part = tvm_icca.partition_for_icca(mod, HW)
    assert tvm_icca.partition_report(part)["host_ops"] == {}
    with tvm_icca.use_hardware(HW):
        tvm.testing.assert_allclose(run(part, "icca"), want, rtol=1e-4, atol=1e-4)


def test_instance_norm_is_a_layer_norm_kind_with_core_local_statistics() -> None:
    """The composite's statistics stay core-local (whole rows per core) and it is costed
    with hoisted row statistics, like a layer norm."""
    def body(x):
        mean = relax.op.mean(x, [2], keepdims=True)
        var = relax.op.variance(x, [2], keepdims=True)
        return relax.op.divide(relax.op.subtract(x, mean),
                               relax.op.sqrt(relax.op.add(var, relax.const(1e-5, "float32"))))

    expr = extract_op(relax_function([(2, 4, 10)], body)).expr
    assert expr.kind == "layer_norm"
    assert not expr.reduce_axes and expr.local_axes
