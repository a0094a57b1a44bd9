"""Partitioning for ICCA: which ops are offloaded, how they are grouped, region attributes."""

from __future__ import annotations

import json
import logging
from typing import Callable, Sequence

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix

import tvm_icca
from tvm_icca.partition.partitioner import HARDWARE_ATTR, icca_regions

F32 = "float32"


def make_mod(
    params: dict[str, tuple[Sequence, str]],
    body: Callable[..., relax.Expr | Sequence[relax.Expr]],
    dataflow: bool = True,
) -> tvm.IRModule:
    """``main(*params)`` whose body is built by ``body(bb, *vars)`` (emitting with bb.emit)."""
    bb = relax.BlockBuilder()
    args = [relax.Var(name, relax.TensorType(shape, dtype)) for name, (shape, dtype) in params.items()]
    with bb.function("main", args):
        if dataflow:
            with bb.dataflow():
                out = body(bb, *args)
                outs = list(out) if isinstance(out, (list, tuple)) else [out]
                gvs = [bb.emit_output(o) for o in outs]
            bb.emit_func_output(gvs[0] if len(gvs) == 1 else relax.Tuple(gvs))
        else:
            out = body(bb, *args)
            bb.emit_func_output(out)
    return bb.get()


def composites(mod: tvm.IRModule) -> list[str]:
    return [c for r in tvm_icca.partition_report(mod)["regions"] for c in r["composites"]]


def host(mod: tvm.IRModule) -> dict[str, int]:
    return tvm_icca.host_ops(mod)


# -- matmul family ------------------------------------------------------------------------------
def test_matmul_bias_relu_fused_in_one_composite() -> None:
    mod = make_mod(
        {"x": ((4, 8), F32), "w": ((8, 16), F32), "b": ((16,), F32)},
        lambda bb, x, w, b: bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, w)), b)))),
    )
    part = tvm_icca.partition_for_icca(mod)
    assert composites(part) == ["icca.matmul_bias_relu"]
    assert host(part) == {}
    (name, region), = icca_regions(part).items()
    assert region.attrs["Codegen"] == "icca"
    assert str(region.attrs["global_symbol"]) == name
    assert json.loads(str(region.attrs[HARDWARE_ATTR])) == tvm_icca.preset("ipu-mk2").to_dict()


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh", "tanh", "sigmoid"])
def test_matmul_activation_epilogues(act: str) -> None:
    ops = {"relu": relax.op.nn.relu, "gelu": relax.op.nn.gelu, "gelu_tanh": relax.op.nn.gelu_tanh,
           "tanh": relax.op.tanh, "sigmoid": relax.op.sigmoid}
    mod = make_mod(
        {"x": ((4, 8), F32), "w": ((8, 16), F32), "b": ((1, 16), F32)},
        lambda bb, x, w, b: bb.emit(ops[act](bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, w)), b)))),
    )
    assert composites(tvm_icca.partition_for_icca(mod)) == [f"icca.matmul_bias_{act}"]


def test_gemm_transb_offloads_the_transpose() -> None:
    # What the ONNX importer emits for Gemm(transB=1) with a weight input.
    mod = make_mod(
        {"x": ((4, 8), F32), "w": ((16, 8), F32), "b": ((16,), F32)},
        lambda bb, x, w, b: bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, bb.emit(relax.op.permute_dims(w)))), b)),
    )
    part = tvm_icca.partition_for_icca(mod)
    assert composites(part) == ["icca.matmul_transposed_bias"]
    assert tvm_icca.partition_report(part)["offloaded_ops"] == {
        "relax.add": 1, "relax.matmul": 1, "relax.permute_dims": 1}


@pytest.mark.parametrize("lhs,rhs", [((2, 4, 8), (8, 16)), ((2, 4, 8), (2, 8, 16)), ((3, 2, 4, 8), (3, 2, 8, 5))])
def test_batched_matmul_offloaded(lhs: tuple, rhs: tuple) -> None:
    mod = make_mod({"a": (lhs, F32), "b": (rhs, F32)}, lambda bb, a, b: bb.emit(relax.op.matmul(a, b)))
    part = tvm_icca.partition_for_icca(mod)
    assert composites(part) == ["icca.matmul"] and host(part) == {}


def test_batched_transpose_of_last_axes_only() -> None:
    swap_last = make_mod(
        {"a": ((2, 4, 8), F32), "b": ((2, 16, 8), F32)},
        lambda bb, a, b: bb.emit(relax.op.matmul(a, bb.emit(relax.op.permute_dims(b, [0, 2, 1])))),
    )
    assert composites(tvm_icca.partition_for_icca(swap_last)) == ["icca.matmul_transposed"]
    other = make_mod(
        {"a": ((2, 4, 8), F32), "b": ((8, 2, 16), F32)},
        lambda bb, a, b: bb.emit(relax.op.matmul(a, bb.emit(relax.op.permute_dims(b, [1, 0, 2])))),
    )
    part = tvm_icca.partition_for_icca(other)
    # any other permutation is a view op of its own, in the same region as the matmul
    assert composites(part) == ["icca.permute_dims", "icca.matmul"]
    assert host(part) == {} and len(icca_regions(part)) == 1


def test_vector_matmul_stays_on_host() -> None:
    mod = make_mod({"a": ((8,), F32), "b": ((8, 4), F32)}, lambda bb, a, b: bb.emit(relax.op.matmul(a, b)))
    part = tvm_icca.partition_for_icca(mod)
    assert composites(part) == [] and host(part) == {"relax.matmul": 1}


def test_leaking_intermediate_is_not_fused() -> None:
    # y is returned as well as activated: fusing relu into matmul's composite would hide y.
    def body(bb, x, w):
        y = bb.emit(relax.op.matmul(x, w))
        return [y, bb.emit(relax.op.nn.relu(y))]

    part = tvm_icca.partition_for_icca(make_mod({"x": ((4, 8), F32), "w": ((8, 16), F32)}, body))
    assert composites(part) == ["icca.matmul", "icca.relu"]
    (region,) = icca_regions(part).values()
    assert isinstance(region.ret_ty, relax.TupleType) and len(region.ret_ty.fields) == 2


# -- conv2d -----------------------------------------------------------------------------------
def test_conv2d_bias_relu_with_stride_padding_dilation() -> None:
    def body(bb, x, w, b):
        conv = bb.emit(relax.op.nn.conv2d(x, w, strides=2, padding=1, dilation=2))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(conv, b))))

    mod = make_mod({"x": ((1, 3, 16, 16), F32), "w": ((8, 3, 3, 3), F32), "b": ((1, 8, 1, 1), F32)}, body)
    part = tvm_icca.partition_for_icca(mod)
    assert composites(part) == ["icca.conv2d_bias_relu"] and host(part) == {}


def test_onnx_style_conv_bias_reshape_of_constant_is_folded() -> None:
    import numpy as np

    bias = relax.const(np.arange(8, dtype=F32))

    def body(bb, x, w):
        conv = bb.emit(relax.op.nn.conv2d(x, w, padding=1))
        return bb.emit(relax.op.add(conv, bb.emit(relax.op.reshape(bias, [1, -1, 1, 1]))))

    part = tvm_icca.partition_for_icca(make_mod({"x": ((1, 3, 8, 8), F32), "w": ((8, 3, 3, 3), F32)}, body))
    assert composites(part) == ["icca.conv2d_bias"] and host(part) == {}


@pytest.mark.parametrize("groups", [2, 4])  # grouped, and depthwise (groups == channels)
def test_grouped_conv_is_offloaded(groups) -> None:
    mod = make_mod(
        {"x": ((1, 4, 8, 8), F32), "w": ((4, 4 // groups, 3, 3), F32)},
        lambda bb, x, w: bb.emit(relax.op.nn.conv2d(x, w, groups=groups)),
    )
    part = tvm_icca.partition_for_icca(mod)
    assert composites(part) == ["icca.conv2d"] and host(part) == {}


@pytest.mark.parametrize("pool", [
    lambda x: relax.op.nn.max_pool2d(x, pool_size=3, strides=2, padding=1),
    lambda x: relax.op.nn.avg_pool2d(x, pool_size=2, strides=2),
    lambda x: relax.op.nn.adaptive_avg_pool2d(x, output_size=1),
], ids=["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"])
def test_pools_are_offloaded(pool) -> None:
    part = tvm_icca.partition_for_icca(make_mod({"x": ((1, 4, 8, 8), F32)}, lambda bb, x: bb.emit(pool(x))))
    assert len(composites(part)) == 1 and host(part) == {}


def test_nhwc_pool_stays_on_host_with_reason() -> None:
    mod = make_mod({"x": ((1, 8, 8, 4), F32)},
                   lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, pool_size=2, layout="NHWC")))
    part = tvm_icca.partition_for_icca(mod)
    assert host(part) == {"relax.nn.max_pool2d": 1}
    assert "NHWC" in tvm_icca.partition_report(part)["host_reasons"]["relax.nn.max_pool2d"][0]


def test_nhwc_conv_stays_on_host() -> None:
    mod = make_mod(
        {"x": ((1, 8, 8, 3), F32), "w": ((4, 3, 3, 3), F32)},
        lambda bb, x, w: bb.emit(relax.op.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="OIHW")),
    )
    part = tvm_icca.partition_for_icca(mod)
    assert host(part) == {"relax.nn.conv2d": 1}
    assert "layout" in tvm_icca.partition_report(part)["host_reasons"]["relax.nn.conv2d"][0]


# -- elementwise, reductions, normalization ---------------------------------------------------
UNARY = {
    "relu": relax.op.nn.relu, "gelu": relax.op.nn.gelu, "gelu_tanh": relax.op.nn.gelu_tanh,
    "tanh": relax.op.tanh, "sigmoid": relax.op.sigmoid, "exp": relax.op.exp,
    "softmax": relax.op.nn.softmax,
    "sum": lambda x: relax.op.sum(x, axis=[1]), "mean": lambda x: relax.op.mean(x, axis=[0, 1], keepdims=True),
}
BINARY = {"add": relax.op.add, "subtract": relax.op.subtract, "multiply": relax.op.multiply,
          "divide": relax.op.divide}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_and_reduce_ops_offloaded(name: str) -> None:
    mod = make_mod({"x": ((4, 8), F32)}, lambda bb, x: bb.emit(UNARY[name](x)))
    part = tvm_icca.partition_for_icca(mod)
    assert composites(part) == [f"icca.{name}"] and host(part) == {}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_offloaded_with_broadcast(name: str) -> None:
    mod = make_mod({"x": ((4, 8), F32), "y": ((8,), F32)}, lambda bb, x, y: bb.emit(BINARY[name](x, y)))
    part = tvm_icca.partition_for_icca(mod)
    assert composites(part) == [f"icca.{name}"] and host(part) == {}


def test_layer_norm_offloaded() -> None:
    mod = make_mod(
        {"x": ((4, 8), F32), "g": ((8,), F32), "b": ((8,), F32)},
        lambda bb, x, g, b: bb.emit(relax.op.nn.layer_norm(x, g, b, axes=[-1])),
    )
    assert composites(tvm_icca.partition_for_icca(mod)) == ["icca.layer_norm"]


def test_neighbouring_ops_merge_into_one_region() -> None:
    def body(bb, x, w, g, b):
        h = bb.emit(relax.op.nn.layer_norm(x, g, b, axes=[-1]))
        h = bb.emit(relax.op.nn.gelu(bb.emit(relax.op.matmul(h, w))))
        return bb.emit(relax.op.nn.softmax(bb.emit(relax.op.multiply(h, relax.const(0.5, F32)))))

    mod = make_mod({"x": ((4, 8), F32), "w": ((8, 8), F32), "g": ((8,), F32), "b": ((8,), F32)}, body)
    part = tvm_icca.partition_for_icca(mod)
    assert len(icca_regions(part)) == 1
    assert composites(part) == ["icca.layer_norm", "icca.matmul_gelu", "icca.multiply", "icca.softmax"]


# -- what stays on the host -------------------------------------------------------------------
def test_unsupported_op_splits_regions_and_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    def body(bb, x, w):
        c = bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(x, w, padding=1))))
        p = bb.emit(relax.op.cumsum(c, axis=3))
        return bb.emit(relax.op.exp(p))

    mod = make_mod({"x": ((1, 3, 8, 8), F32), "w": ((4, 3, 3, 3), F32)}, body)
    with caplog.at_level(logging.INFO, logger="tvm_icca.partition.partitioner"):
        part = tvm_icca.partition_for_icca(mod)
    report = tvm_icca.partition_report(part)
    assert len(report["regions"]) == 2
    assert report["host_ops"] == {"relax.cumsum": 1}
    assert report["host_reasons"]["relax.cumsum"] == ["no ICCA implementation"]
    assert report["offloaded_ops"] == {"relax.exp": 1, "relax.nn.conv2d": 1, "relax.nn.relu": 1}
    assert "host: relax.cumsum x1" in caplog.text


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_unsupported_dtypes_stay_on_host(dtype: str) -> None:
    mod = make_mod({"x": ((4, 8), dtype), "y": ((4, 8), dtype)}, lambda bb, x, y: bb.emit(relax.op.add(x, y)))
    part = tvm_icca.partition_for_icca(mod)
    assert composites(part) == [] and host(part) == {"relax.add": 1}
    assert f"dtype {dtype}" in tvm_icca.partition_report(part)["host_reasons"]["relax.add"][0]


def test_float16_follows_the_chip() -> None:
    mod = make_mod({"x": ((4, 8), "float16"), "w": ((8, 4), "float16")}, lambda bb, x, w: bb.emit(relax.op.matmul(x, w)))
    assert composites(tvm_icca.partition_for_icca(mod)) == ["icca.matmul"]
    fp32_only = tvm_icca.small_chip(4, dtypes=("float32",))
    part = tvm_icca.partition_for_icca(mod, fp32_only)
    assert host(part) == {"relax.matmul": 1}


def test_dynamic_shapes_stay_on_host() -> None:
    n = tvm.tirx.Var("n", "int64")
    mod = make_mod({"x": ((n, 8), F32), "w": ((8, 4), F32)}, lambda bb, x, w: bb.emit(relax.op.nn.relu(bb.emit(relax.op.matmul(x, w)))))
    part = tvm_icca.partition_for_icca(mod)
    assert composites(part) == [] and host(part) == {"relax.matmul": 1, "relax.nn.relu": 1}
    assert "dynamic shape" in tvm_icca.partition_report(part)["host_reasons"]["relax.matmul"][0]


def test_function_without_dataflow_block_is_partitioned() -> None:
    mod = make_mod({"x": ((4, 8), F32)}, lambda bb, x: bb.emit(relax.op.nn.relu(x)), dataflow=False)
    assert composites(tvm_icca.partition_for_icca(mod)) == ["icca.relu"]


# -- hardware ---------------------------------------------------------------------------------
def test_hardware_stamp_follows_argument_and_context() -> None:
    mod = make_mod({"x": ((4, 8), F32)}, lambda bb, x: bb.emit(relax.op.exp(x)))

    def stamped(part: tvm.IRModule) -> str:
        (region,) = icca_regions(part).values()
        return json.loads(str(region.attrs[HARDWARE_ATTR]))["name"]

    assert stamped(tvm_icca.partition_for_icca(mod)) == "ipu-mk2"
    assert stamped(tvm_icca.partition_for_icca(mod, "ipu-pod4")) == "ipu-pod4"
    with tvm_icca.use_hardware(tvm_icca.small_chip(8)):
        assert stamped(tvm_icca.partition_for_icca(mod)) == "icca-8"
    assert tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, "ipu-pod4"))["hardware"] == "ipu-pod4"


def test_partitioning_twice_changes_nothing() -> None:
    mod = make_mod({"x": ((4, 8), F32)}, lambda bb, x: bb.emit(relax.op.exp(x)))
    once = tvm_icca.partition_for_icca(mod)
    assert tvm_icca.partition_for_icca(once, "ipu-pod4").same_as(once)


def test_patterns_are_registered_under_icca_prefix() -> None:
    names = [p.name for p in get_patterns_with_prefix("icca")]
    assert all(n.startswith("icca.") for n in names)
    for expected in ("icca.matmul", "icca.matmul_transposed_bias_gelu", "icca.conv2d_bias_relu",
                     "icca.softmax", "icca.layer_norm", "icca.sum", "icca.mean", "icca.divide"):
        assert expected in names
    # Highest priority first: a fused pattern must be tried before its prefix.
    assert names.index("icca.matmul_bias_relu") < names.index("icca.matmul_bias") < names.index("icca.matmul")


# -- clip, where, astype ----------------------------------------------------------------------------
def test_clip_alone_and_as_matmul_epilogue() -> None:
    def clip(x, lo=0.0, hi=6.0):
        return relax.op.clip(x, relax.prim_value(tvm.tirx.FloatImm(F32, lo)),
                             relax.prim_value(tvm.tirx.FloatImm(F32, hi)))

    mod = make_mod({"x": ((4, 8), F32), "w": ((8, 4), F32)},
                   lambda bb, x, w: bb.emit(clip(bb.emit(relax.op.matmul(x, w)))))
    assert composites(tvm_icca.partition_for_icca(mod)) == ["icca.matmul_clip"]
    mod = make_mod({"x": ((4, 8), F32)}, lambda bb, x: bb.emit(clip(x, -float("inf"), 6.0)))
    reasons = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod))["host_reasons"]
    assert "infinite bound" in reasons["relax.clip"][0]


def test_where_reads_a_bool_mask_and_explains_other_conditions() -> None:
    def where(bb, c, x, y):
        return bb.emit(relax.op.where(c, x, y))

    mod = make_mod({"c": ((4, 8), "bool"), "x": ((4, 8), F32), "y": ((4, 8), F32)}, where)
    assert composites(tvm_icca.partition_for_icca(mod)) == ["icca.where"]
    mod = make_mod({"c": ((4, 8), "bool"), "x": ((4, 8), "int32"), "y": ((4, 8), "int32")}, where)
    reasons = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod))["host_reasons"]
    assert "dtype int32" in reasons["relax.where"][0]


def test_astype_between_floats_only() -> None:
    mod = make_mod({"x": ((4, 8), F32)}, lambda bb, x: bb.emit(relax.op.astype(x, "bfloat16")))
    assert composites(tvm_icca.partition_for_icca(mod)) == ["icca.astype"]
    mod = make_mod({"x": ((4, 8), F32)}, lambda bb, x: bb.emit(relax.op.astype(x, "int32")))
    reasons = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod))["host_reasons"]
    assert "dtype int32" in reasons["relax.astype"][0]
    # a mask is read, never computed
    mod = make_mod({"x": ((4, 8), F32)}, lambda bb, x: bb.emit(relax.op.astype(x, "bool")))
    assert "dtype bool" in tvm_icca.partition_report(tvm_icca.partition_for_icca(mod))["host_reasons"]["relax.astype"][0]


@pytest.mark.parametrize("op_type", ["NonZero", "Unique"])
def test_data_dependent_shapes_fall_back_to_the_host_with_a_reason(op_type) -> None:
    """TVM's MergeCompositeFunctions cannot visit the match_cast of a data-dependent shape;
    such a model runs on the host, correct against onnx's reference, and the report says why
    (it used to escape as ``TypeError: Invalid type: relax.expr.MatchCast``)."""
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op_type, ["r"], ["y"])]
    out_type = TensorProto.INT64 if op_type == "NonZero" else TensorProto.FLOAT
    rank = 2 if op_type == "NonZero" else 1
    graph = helper.make_graph(nodes, "dd",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info("y", out_type, [None] * rank)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    x = np.array([[0, 1, -2, 2]] * 4, "float32")
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    mod = tvm_icca.load_onnx(model)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod))
    assert report["regions"] == [] and "data-dependent shapes" in report["notes"][0]
    vm = relax.VirtualMachine(tvm.compile(mod, target="icca"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x))
    np.testing.assert_array_equal(np.asarray(got.numpy()).ravel(), np.asarray(want).ravel())


def test_control_flow_falls_back_to_the_host_with_a_reason() -> None:
    """TVM's MergeCompositeFunctions has no visitor for relax.If (an InternalError from C++):
    a model with an ONNX If is decided host-only before regions are formed, the report says
    why for every op, and the model still computes both branches right."""
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Branchy:
        @R.function
        def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 8), "float32"),
                 cond: R.Tensor((), "bool")):
            with R.dataflow():
                y = R.matmul(x, w)
                R.output(y)
            if cond:
                r = R.nn.relu(y)
            else:
                r = R.exp(y)
            return r

    partitioned = tvm_icca.partition_for_icca(Branchy)
    report = tvm_icca.partition_report(partitioned)
    assert report["regions"] == [] and "control flow" in report["notes"][0]
    assert set(report["host_ops"]) == {"relax.matmul", "relax.nn.relu", "relax.exp"}
    assert all("whole model stays on the host" in reasons[0]
               for reasons in report["host_reasons"].values())
    vm = relax.VirtualMachine(tvm.compile(Branchy, target="icca"), tvm.cpu())
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 8), "float32"), rng.standard_normal((8, 8), "float32")
    for cond, want in ((True, np.maximum(x @ w, 0)), (False, np.exp(x @ w))):
        got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w),
                         tvm.runtime.tensor(np.array(cond)))
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_symbolic_dimension_used_as_a_value_falls_back_to_the_host_with_a_reason() -> None:
    """``arange(0, n)`` over a symbolic dimension (TVM's importer writes it for ONNX Range or
    Trilu; a 0-sized ONNX dimension is imported symbolic) failed MergeCompositeFunctions'
    variable lookup in C++; such a model runs on the host, said so, and computes right."""
    from tvm import tirx

    n = tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, n), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            positions = bb.emit(relax.op.astype(relax.op.arange(0, n, 1, "int64"), "float32"))
            out = bb.emit_output(bb.emit(relax.op.add(relax.op.exp(x), positions)))
        bb.emit_func_output(out)
    mod = bb.get()
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod))
    assert report["regions"] == [] and "symbolic dimension 'n' as a value" in report["notes"][0]
    assert "relax.exp" in report["host_ops"]
    vm = relax.VirtualMachine(tvm.compile(mod, target="icca"), tvm.cpu())
    x_value = np.random.default_rng(0).standard_normal((3, 4), "float32")
    got = vm["main"](tvm.runtime.tensor(x_value)).numpy()
    np.testing.assert_allclose(got, np.exp(x_value) + np.arange(4, dtype="float32"), rtol=1e-5)


# -- patterns a user registers ----------------------------------------------------------------
_USER_PATTERN_SCRIPT = r'''
import json
import numpy as np
import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import register_patterns
from tvm.relax.dpl.pattern import is_op, wildcard
import tvm_icca

seen = []

def fits_the_chip(context):
    call = context.matched_expr
    hw = tvm_icca.current_hardware()  # the chip being partitioned for
    seen.append(hw.name)
    return str(call.ty.dtype) in hw.dtypes

register_patterns([("icca.test_user_softplus", is_op("relax.nn.softplus")(wildcard()), {},
                    fits_the_chip)])

def softplus_mod(dtype):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 24), dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.softplus(x)))
        bb.emit_func_output(out)
    return bb.get()

chip = tvm_icca.small_chip(16, dtypes=("float32",))
part = tvm_icca.partition_for_icca(softplus_mod("float32"), chip)
offloaded = tvm_icca.partition_report(part)
with tvm_icca.use_hardware(chip):
    vm = relax.VirtualMachine(tvm.compile(part, target="icca"), tvm.cpu())
x = np.random.default_rng(0).standard_normal((8, 24)).astype("float32")
error = float(np.abs(vm["main"](tvm.runtime.tensor(x)).numpy() - np.logaddexp(0, x)).max())
refused = tvm_icca.partition_report(tvm_icca.partition_for_icca(softplus_mod("float16"), chip))
print(json.dumps({"seen": seen, "offloaded": offloaded, "refused": refused, "error": error,
                  "ran": tvm_icca.last_run_stats()["regions_executed"]}))
'''


def test_a_pattern_a_user_registers_offloads_its_op_and_the_report_explains_a_refusal() -> None:
    """``icca.*`` patterns registered by a user are the partitioner's too: the op is offloaded
    and computed exactly; the check sees the chip partitioned for as ``current_hardware()``;
    an op the check refuses is reported with the pattern's name, not "no ICCA implementation".
    (In a subprocess: TVM's pattern registry is process-global.)"""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _USER_PATTERN_SCRIPT], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["seen"] == ["icca-16", "icca-16"]
    assert result["offloaded"]["offloaded_ops"] == {"relax.nn.softplus": 1}
    assert result["offloaded"]["regions"][0]["composites"] == ["icca.test_user_softplus"]
    assert result["ran"] == 1 and result["error"] < 1e-5
    (reason,) = result["refused"]["host_reasons"]["relax.nn.softplus"]
    assert reason.startswith("the check function of pattern 'icca.test_user_softplus' refused it")
    assert "dtype float16" in reason and "icca-16" in reason


def test_host_ops_are_named_by_their_source_op() -> None:
    """``source_op``: the ONNX op type the model names (Einsum, for the TIR function TVM's
    importer emitted), else the lowered function's or the Relax op's name."""
    from tvm_icca.partition.partitioner import host_op_lines, source_op

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    w = relax.Var("w", relax.TensorType((8, 8), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            e = bb.emit_te(tvm.topi.einsum, "ij,jk->ik", x, w)
            c = bb.emit(relax.op.cumsum(e, axis=0))
            out = bb.emit_output(c)
        bb.emit_func_output(out)
    mod = bb.get()
    calls = [b.value for b in mod["main"].body.blocks[0].bindings]
    assert source_op(calls[0]) == "einsum"
    assert source_op(calls[0], {"einsum": "Einsum"}) == "Einsum"
    assert source_op(calls[1]) == "relax.cumsum"
    assert source_op(calls[1], {"cumsum": "CumSum"}) == "CumSum"

    onnx_like = mod.with_attr("icca.onnx_op_types", ["CumSum", "Einsum"])
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(onnx_like, "ipu-mk2"))
    assert {(e["op"], e["relax_op"], e["count"]) for e in report["host_sources"]} == {
        ("Einsum", "relax.call_tir", 1), ("CumSum", "relax.cumsum", 1)}
    lines = host_op_lines(report)
    assert any(line.startswith("host: Einsum x1 (relax.call_tir: ") and "'einsum'" in line
               for line in lines), lines
    assert "host: CumSum x1 (relax.cumsum: no ICCA implementation)" in lines


def test_the_headline_says_relax_ops_were_fused_into_fewer_device_ops() -> None:
    """"29 op(s) offloaded" beside "(22 ops)" read as a loss: the headline counts Relax ops,
    the region labels fused device ops, and it now says so."""
    mod = make_mod(
        {"x": ((4, 8), F32), "w": ((8, 16), F32), "b": ((16,), F32)},
        lambda bb, x, w, b: bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, w)), b)))),
    )
    text = tvm_icca.format_report(tvm_icca.partition_report(tvm_icca.partition_for_icca(mod)))
    assert "3 Relax op(s) offloaded (fused into 1 device op(s)" in text and "(1 op)" in text
    alone = make_mod({"x": ((4, 8), F32)}, lambda bb, x: bb.emit(relax.op.nn.relu(x)))
    text = tvm_icca.format_report(tvm_icca.partition_report(tvm_icca.partition_for_icca(alone)))
    assert "1 Relax op(s) offloaded, 0 op(s) on the host" in text  # nothing fused: no remark
