"""Grouped / depthwise convolution, pooling and batch norm on the chip.

Two kinds of checks: single operators converted from TVM's own TE and run on the functional
device under random valid plans, against numpy written from the operator definitions; and
blocks of real CNNs (a MobileNetV2 inverted residual block, a ResNet basic block with its
stem pool and classifier head) built with ``onnx.helper``, compiled for target "icca" and
compared with ``onnx.reference.ReferenceEvaluator`` and TVM's own llvm build.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

tvm = pytest.importorskip("tvm")
import functools  # noqa: E402

import onnx  # noqa: E402
import tvm.testing  # noqa: E402,F811  (loads the submodule of the tvm imported above)
import tvm_ffi  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from tvm import relax  # noqa: E402

import tvm_icca  # noqa: E402
from runtime_sim.contract.expr import TensorExpr  # noqa: E402
from runtime_sim.contract.layout import OpLayout  # noqa: E402
from runtime_sim.contract.plan import ExecutionPlan  # noqa: E402
from runtime_sim.contract.plan_rules import pinned_axes  # noqa: E402
from runtime_sim.contract.presets import preset, small_chip  # noqa: E402
from runtime_sim.contract.program import DeviceProgram, OpProgram, TensorDecl  # noqa: E402
from runtime_sim.functional.device import SimulatedDevice  # noqa: E402
from tvm_icca.frontend.conv_rewrites import FoldInferenceBatchNorm  # noqa: E402
from tvm_icca.lower.te_to_expr import extract_op  # noqa: E402
from tvm_icca.plan_search.search import plan_operator  # noqa: E402
from tvm_icca.testing.exprs import random_plan  # noqa: E402
from tvm_icca.testing.relax_functions import relax_function  # noqa: E402
from tvm_icca.testing.device_runs import reference_build

op = relax.op
OPSET = 17


# -- numpy references (from the ONNX operator definitions) -------------------------------------
def np_group_conv(x, w, stride, pad, groups):
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    fg = f // groups
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, f, oh, ow))
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i:i + stride * (oh - 1) + 1:stride,
                           j:j + stride * (ow - 1) + 1:stride]
                out[:, g * fg:(g + 1) * fg] += np.einsum("nchw,fc->nfhw", patch, w[g * fg:(g + 1) * fg, :, i, j])
    return out


def np_max_pool(x, k, stride, pad):
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    oh, ow = (x.shape[2] + 2 * pad - k) // stride + 1, (x.shape[3] + 2 * pad - k) // stride + 1
    return np.max([xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
                   for i in range(k) for j in range(k)], axis=0)


relax_func = relax_function


def run_on_device(func: relax.Function | tuple, arrays, plan_choice, cores: int) -> tuple[np.ndarray, object]:
    ext = _extracted(*func) if isinstance(func, tuple) else extract_op(func)
    expr = ext.expr
    plan = random_plan(plan_choice, expr, cores)
    hw = small_chip(cores)
    decls = tuple(TensorDecl(t.name, t.shape, t.dtype) for t in expr.inputs)
    program = DeviceProgram("r0", hw.to_dict(), decls, (expr.output.name,),
                            (OpProgram("op0", expr, plan, tuple(t.name for t in expr.inputs), expr.output.name),))
    (out,) = SimulatedDevice().run(program, [arrays[p] for p in ext.param_of_input])
    return out, plan


@functools.lru_cache(maxsize=None)
def _extracted(kind: str, *key):
    """The converted operator of a parametrized case, converted once per test session."""
    return extract_op(BUILDERS[kind](*key))


def _conv_func(c, f, groups, stride, bias):
    shapes = [(2, c, 7, 7), (f, c // groups, 3, 3), (1, f, 1, 1)]

    def body(x, w, b):
        y = op.nn.conv2d(x, w, strides=stride, padding=1, groups=groups)
        return op.nn.relu(op.add(y, b)) if bias else y

    return relax_func(shapes, body)


POOLS = {
    "max": lambda v: op.nn.max_pool2d(v, pool_size=3, strides=2, padding=1),
    "avg": lambda v: op.nn.avg_pool2d(v, pool_size=3, strides=2, padding=1, count_include_pad=True),
    "avg_excl": lambda v: op.nn.avg_pool2d(v, pool_size=3, strides=2, padding=1),
    "global": lambda v: op.mean(v, axis=[2, 3], keepdims=True),
}
BUILDERS = {"conv": _conv_func, "pool": lambda kind: relax_func([(2, 3, 7, 7)], POOLS[kind])}


# -- single operators on the functional device ------------------------------------------------
CONV_CASES = [  # (C, F, groups, stride): grouped, depthwise, depthwise with multiplier 2
    (8, 8, 4, 2), (6, 6, 6, 1), (4, 8, 4, 2), (6, 12, 3, 1),
]


@settings(max_examples=25, deadline=None)
@given(data=st.data(), case=st.sampled_from(CONV_CASES), bias=st.booleans(),
       cores=st.sampled_from([4, 8, 16, 32]))
def test_grouped_conv_random_plans_match_numpy(data, case, bias, cores) -> None:
    c, f, groups, stride = case
    shapes = [(2, c, 7, 7), (f, c // groups, 3, 3), (1, f, 1, 1)]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    got, plan = run_on_device(("conv", c, f, groups, stride, bias), arrays,
                              lambda o: data.draw(st.sampled_from(list(o))), cores)
    want = np_group_conv(arrays[0], arrays[1], stride, 1, groups)
    if bias:
        want = np.maximum(want + arrays[2], 0)
    tvm.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_grouped_conv_has_a_group_axis() -> None:
    """groups=4, F=8: out[n, g*2 + f] reads x[n, g*2 + rc]; only g partitions the channels."""
    expr = extract_op(relax_func([(1, 8, 6, 6), (8, 2, 3, 3)],
                                 lambda x, w: op.nn.conv2d(x, w, padding=1, groups=4))).expr
    assert [(a.name, a.extent) for a in expr.axes][:3] == [("nn", 1), ("g", 4), ("f", 2)]
    assert str(expr.output.indices[1]) == "g*2 + f" and str(expr.inputs[0].indices[1]) == "g*2 + rc"
    assert expr.kind == "conv2d" and pinned_axes(expr) == {"f"}
    dw = extract_op(relax_func([(1, 8, 6, 6), (8, 1, 3, 3)],
                               lambda x, w: op.nn.conv2d(x, w, padding=1, groups=8))).expr
    assert dw.kind == "depthwise_conv2d" and pinned_axes(dw) == set()


def test_max_pool_splits_spatial_axes() -> None:
    """A windowed max reduces whole windows per core; the output rows split like a conv's."""
    func = relax_func([(1, 4, 9, 9)], lambda x: op.nn.max_pool2d(x, pool_size=3, strides=2, padding=1))
    expr = extract_op(func).expr
    assert expr.combiner == "max" and pinned_axes(expr) == set(expr.reduce_axes)
    assert expr.to_dict()["combiner"] == "max" and TensorExpr.from_dict(expr.to_dict()) == expr
    plan = ExecutionPlan({"ax1": 2, "ax2": 2, "ax3": 2}, tuple({} for _ in expr.tensors))
    OpLayout(expr, plan).validate()
    x = np.random.default_rng(0).standard_normal((1, 4, 9, 9)).astype("float32")
    got, _ = run_on_device(func, [x], lambda o: list(o)[-1], 16)
    tvm.testing.assert_allclose(got, np_max_pool(x, 3, 2, 1), rtol=1e-6)


@settings(max_examples=15, deadline=None)
@given(data=st.data(), kind=st.sampled_from(["max", "avg", "avg_excl", "global"]),
       cores=st.sampled_from([4, 16]))
def test_pools_random_plans_match_numpy(data, kind, cores) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 7, 7)).astype("float32")
    got, _ = run_on_device(("pool", kind), [x], lambda o: data.draw(st.sampled_from(list(o))), cores)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ones = np.pad(np.ones((7, 7)), 1)
    windows = lambda a: np.array([a[..., i:i + 7:2, j:j + 7:2] for i in range(3) for j in range(3)])  # noqa: E731
    want = {
        "max": lambda: np_max_pool(x, 3, 2, 1),
        "avg": lambda: windows(xp).sum(0) / 9,
        "avg_excl": lambda: windows(xp).sum(0) / windows(ones).sum(0),
        "global": lambda: x.mean(axis=(2, 3), keepdims=True),
    }[kind]()
    tvm.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_depthwise_conv_plans_in_seconds() -> None:
    """MobileNetV2's first depthwise conv (112x112x32, batch 1) on a whole IPU MK2."""
    expr = extract_op(relax_func([(1, 32, 112, 112), (32, 1, 3, 3)],
                                 lambda x, w: op.nn.conv2d(x, w, padding=1, groups=32))).expr
    start = time.perf_counter()
    planned = plan_operator(expr, preset("ipu-mk2"), name="depthwise")
    assert time.perf_counter() - start < 10
    assert planned.plan.num_cores > 1000  # the channel and spatial axes spread it over the chip


# -- batch norm --------------------------------------------------------------------------------
def test_batch_norm_folds_into_conv_or_decomposes() -> None:
    rng = np.random.default_rng(0)
    const = lambda *s: relax.const(rng.uniform(0.5, 1.5, s).astype("float32"))  # noqa: E731
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 6, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op.nn.conv2d(x, const(4, 4, 3, 3), padding=1))
            y = bb.emit(relax.TupleGetItem(bb.emit(op.nn.batch_norm(
                y, const(4), const(4), const(4), const(4), axis=1, training=False)), 0))
            z = bb.emit(relax.TupleGetItem(bb.emit(op.nn.batch_norm(
                x, const(4), const(4), const(4), const(4), axis=1, training=False)), 0))
            out = bb.emit_output(op.add(y, z))
        bb.emit_func_output(out)
    mod = bb.get()
    part = tvm_icca.partition_for_icca(mod, small_chip(16))
    report = tvm_icca.partition_report(part)
    assert report["host_ops"] == {} and "relax.nn.batch_norm" not in report["offloaded_ops"]
    composites = [c for r in report["regions"] for c in r["composites"]]
    assert "icca.conv2d_bias" in composites  # the folded batch norm is the conv's bias
    data = rng.standard_normal((1, 4, 6, 6)).astype("float32")
    want = relax.VirtualMachine(reference_build(mod), tvm.cpu())["main"](
        tvm.runtime.tensor(data)).numpy()
    ex = tvm.compile(part, target="icca")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
    tvm.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_training_batch_norm_is_left_alone() -> None:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 4, 3, 3), "float32"))
    p = relax.const(np.ones(4, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.TupleGetItem(bb.emit(op.nn.batch_norm(x, p, p, p, p, axis=1)), 0))
        bb.emit_func_output(out)
    mod = bb.get()
    assert tvm_ffi.structural_equal(FoldInferenceBatchNorm(mod), mod)


# -- CNN blocks from ONNX ------------------------------------------------------------------------
class _Graph:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def init(self, value: np.ndarray) -> str:
        self.count += 1
        name = f"w{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, kind: str, inputs: list[str], **attrs) -> str:
        self.count += 1
        out = f"{kind.lower()}{self.count}"
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
                bias: bool = False) -> str:
        w = self.init((self.rng.standard_normal((cout, cin // groups, k, k))
                       / np.sqrt(cin // groups * k * k)).astype("float32"))
        b = [self.init(self.rng.uniform(-0.5, 0.5, cout).astype("float32"))] if bias else []
        y = self.node("Conv", [x, w] + b, kernel_shape=[k, k], strides=[stride, stride],
                      pads=[k // 2] * 4, group=groups)
        params = [self.rng.uniform(0.5, 1.5, cout), self.rng.uniform(-0.2, 0.2, cout),
                  self.rng.uniform(-0.2, 0.2, cout), self.rng.uniform(0.5, 1.5, cout)]
        return self.node("BatchNormalization", [y] + [self.init(p.astype("float32")) for p in params],
                         epsilon=1e-5)

    def model(self, inputs: dict[str, tuple], output: str, out_shape: tuple) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "block",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(out_shape))], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def inverted_residual(stride: int, batch: int = 1, c: int = 8, size: int = 10, expand: int = 4):
    """MobileNetV2's block: 1x1 expand + BN + ReLU6, 3x3 depthwise + BN + ReLU6, 1x1 project + BN,
    residual add at stride 1. ReLU6 is written as Relu here: Clip (ReLU6) is made offloadable
    by another change; a Clip would stay on the host and split the region in this branch."""
    g = _Graph(stride)
    hidden = c * expand
    h = g.node("Relu", [g.conv_bn("x", c, hidden, 1)])
    h = g.node("Relu", [g.conv_bn(h, hidden, hidden, 3, stride, groups=hidden)])
    y = g.conv_bn(h, hidden, c, 1)
    if stride == 1:
        y = g.node("Add", [y, "x"])
    out = size // stride
    return g.model({"x": (batch, c, size, size)}, y, (batch, c, out, out))


def resnet_basic_block(batch: int = 2, c: int = 8, size: int = 16, classes: int = 5):
    """ResNet's stem (conv + BN + ReLU, 3x3/2 max pool), one basic block, and the head
    (GlobalAveragePool, Flatten, Gemm)."""
    g = _Graph(7)
    h = g.node("Relu", [g.conv_bn("x", 3, c, 3, 2)])
    h = g.node("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.node("Relu", [g.conv_bn(h, c, c, 3)])
    y = g.node("Relu", [g.node("Add", [g.conv_bn(y, c, c, 3), h])])
    y = g.node("Flatten", [g.node("GlobalAveragePool", [y])])
    w = g.init((g.rng.standard_normal((classes, c)) / np.sqrt(c)).astype("float32"))
    b = g.init(g.rng.standard_normal(classes).astype("float32"))
    y = g.node("Gemm", [y, w, b], transB=1)
    return g.model({"x": (batch, 3, size, size)}, y, (batch, classes))


BLOCKS = {
    "inverted_residual_s1": lambda: inverted_residual(stride=1),
    "inverted_residual_s2": lambda: inverted_residual(stride=2, batch=2),
    "resnet_basic_block": resnet_basic_block,
}
CONV_BLOCK_OPS = {"relax.nn.conv2d", "relax.nn.max_pool2d", "relax.mean", "relax.add", "relax.nn.relu"}


@pytest.mark.parametrize("name", list(BLOCKS))
def test_cnn_block_from_onnx(name: str) -> None:
    model = BLOCKS[name]()
    onnx.checker.check_model(model)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]

    mod = tvm_icca.load_onnx(model)
    hw = small_chip(16)
    part = tvm_icca.partition_for_icca(mod, hw)
    report = tvm_icca.partition_report(part)
    # every conv, folded batch norm, pool and residual add is on the chip, in one region;
    # only Flatten (a reshape, made a device op by another change) may stay on the host
    assert set(report["host_ops"]) <= {"relax.reshape", "relax.flatten"}, report["host_ops"]
    conv_regions = [r for r in report["regions"] if "relax.nn.conv2d" in r["ops"]]
    assert len(conv_regions) == 1
    assert set(conv_regions[0]["ops"]) >= CONV_BLOCK_OPS - ({"relax.nn.max_pool2d", "relax.mean"}
                                                           if name != "resnet_basic_block" else set()) \
        - ({"relax.add"} if name == "inverted_residual_s2" else set())

    with tvm_icca.use_hardware(hw):
        ex = tvm.compile(mod, target="icca")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    llvm = relax.VirtualMachine(reference_build(mod), tvm.cpu())["main"](
        tvm.runtime.tensor(x)).numpy()
    tvm.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    tvm.testing.assert_allclose(got, llvm, rtol=1e-4, atol=1e-4)
    assert tvm_icca.last_run_stats()["regions_executed"] >= 1


def test_grouped_conv_and_pool_regions_run_as_vgm_too() -> None:
    """The load-compute-store baseline stores a g*k + f output channel like a (G, k) pair."""
    from runtime_sim.functional import vgm_exec
    from tvm_icca.model_pass.region_plans import compile_region

    g = _Graph(5)
    y = g.node("Relu", [g.conv_bn("x", 8, 12, 3, 1, groups=4)])
    y = g.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    model = g.model({"x": (1, 8, 6, 6)}, y, (1, 12, 3, 3))
    x = np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype("float32")
    hw = small_chip(16, 64 * 1024)
    part = tvm_icca.partition_for_icca(tvm_icca.load_onnx(model), hw)
    (name, func), = tvm_icca.icca_regions(part).items()
    args = []
    for binding in part["main"].body.blocks[0].bindings:
        if getattr(getattr(binding.value, "op", None), "name_hint", None) == name:
            args = [a.value.numpy() if isinstance(a, tvm.ir.GenericConst) else x for a in binding.value.args]
    t10 = compile_region(func, name, hw)
    vgm = compile_region(func, name, hw, execution="vgm",
                         vgm_region_bytes=vgm_exec.region_bytes_per_core(t10, hw.num_cores))
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    for program in (t10, vgm):
        (got,) = SimulatedDevice().run(program, args)
        tvm.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias", [False, True])
def test_batch_norm_after_a_conv_with_a_bias_folds_into_it(bias: bool) -> None:
    """PyTorch exports Conv with a bias before BatchNormalization when ``bias=True``: the batch
    norm folds into the conv's weight and bias either way, so both graphs offload the same
    device ops (no leftover ``x * s + t``), and the answer is onnx's reference."""
    g = _Graph(11)
    y = g.node("Relu", [g.conv_bn("x", 4, 8, 3, bias=bias)])
    model = g.model({"x": (1, 4, 6, 6)}, y, (1, 8, 6, 6))
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype("float32")
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    mod = tvm_icca.load_onnx(model)
    hw = small_chip(16)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, hw))
    assert report["host_ops"] == {}
    assert report["offloaded_ops"] == {"relax.add": 1, "relax.nn.conv2d": 1, "relax.nn.relu": 1}
    with tvm_icca.use_hardware(hw):
        ex = tvm.compile(mod, target="icca")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    tvm.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# -- conv1d ------------------------------------------------------------------------------------
def np_conv1d(x, w, stride, pads, dilation, groups):
    """``y[n, f, t] = sum_{c, k} xp[n, g*C/G + c, t*stride + k*dilation] * w[f, c, k]`` with
    ``xp`` zero-padded by ``pads`` = (begin, end) and ``g = f // (F/G)`` (ONNX Conv)."""
    n, c, _ = x.shape
    f, cg, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), tuple(pads)))
    out_len = (xp.shape[2] - dilation * (kw - 1) - 1) // stride + 1
    fg = f // groups
    out = np.zeros((n, f, out_len))
    for g in range(groups):
        for k in range(kw):
            patch = xp[:, g * cg:(g + 1) * cg, k * dilation:k * dilation + stride * (out_len - 1) + 1:stride]
            out[:, g * fg:(g + 1) * fg] += np.einsum("nct,fc->nft", patch, w[g * fg:(g + 1) * fg, :, k])
    return out


CONV1D_CASES = {  # name: (C, F, kernel, stride, pads, dilation, groups, bias, activation)
    "strided_gelu": (1, 8, 10, 5, [0, 0], 1, 1, False, "Gelu"),  # wav2vec2's first layer
    "strided_bias_relu": (4, 8, 3, 2, [1, 1], 1, 1, True, "Relu"),
    "dilated_asymmetric": (4, 6, 3, 1, [3, 1], 2, 1, True, None),
    "grouped": (6, 9, 3, 1, [1, 1], 1, 3, True, "Sigmoid"),
    "depthwise": (6, 6, 3, 1, [1, 1], 1, 6, True, None),
    "depthwise_multiplier_strided": (4, 8, 4, 3, [0, 2], 1, 4, False, "Relu"),
}
_ACTIVATION_SUFFIX = {"Gelu": "_gelu", "Relu": "_relu", "Sigmoid": "_sigmoid", None: ""}
HW_CONV1D = small_chip(16, 16 * 1024)


def conv1d_model(c, f, k, stride, pads, dilation, groups, bias, activation, length=23, batch=2):
    rng = np.random.default_rng(c * 31 + f)
    inits = [numpy_helper.from_array((rng.standard_normal((f, c // groups, k))
                                      / np.sqrt(c // groups * k)).astype("float32"), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.uniform(-0.5, 0.5, f).astype("float32"), "b"))
    out = (length + sum(pads) - dilation * (k - 1) - 1) // stride + 1
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c" if activation else "y"],
                              kernel_shape=[k], strides=[stride], pads=pads, dilations=[dilation],
                              group=groups)]
    if activation:
        nodes.append(helper.make_node(activation, ["c"], ["y"]))
    graph = helper.make_graph(nodes, "conv1d",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, length])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, f, out])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])  # Gelu: opset 20


@pytest.mark.parametrize("name", list(CONV1D_CASES))
def test_conv1d_from_onnx_runs_on_the_chip(name: str) -> None:
    """Strided, dilated, grouped and depthwise 1-D convolutions with asymmetric pads, bias and
    activation epilogues: one fused operator on the chip, nothing on the host."""
    c, f, k, stride, pads, dilation, groups, bias, activation = CONV1D_CASES[name]
    model = conv1d_model(*CONV1D_CASES[name])
    onnx.checker.check_model(model)
    x = np.random.default_rng(5).standard_normal((2, c, 23)).astype("float32")
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]

    mod = tvm_icca.load_onnx(model)
    part = tvm_icca.partition_for_icca(mod, HW_CONV1D)
    report = tvm_icca.partition_report(part)
    assert report["host_ops"] == {}, report["host_reasons"]
    composite = "icca.conv1d" + ("_bias" if bias else "") + _ACTIVATION_SUFFIX[activation]
    assert [r["composites"] for r in report["regions"]] == [[composite]]
    with tvm_icca.use_hardware(HW_CONV1D):
        ex = tvm.compile(mod, target="icca")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    tvm.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert tvm_icca.last_run_stats()["regions_executed"] == 1


def _conv1d_func(c, f, k, stride, pads, dilation, groups):
    return relax_func([(2, c, 23), (f, c // groups, k)], lambda x, w: op.nn.conv1d(
        x, w, strides=stride, padding=pads, dilation=dilation, groups=groups))


BUILDERS["conv1d"] = _conv1d_func


@settings(max_examples=20, deadline=None)
@given(data=st.data(), name=st.sampled_from(list(CONV1D_CASES)), cores=st.sampled_from([4, 8, 16]))
def test_conv1d_random_plans_match_numpy(data, name, cores) -> None:
    c, f, k, stride, pads, dilation, groups, _, _ = CONV1D_CASES[name]
    key = (c, f, k, stride, tuple(pads), dilation, groups)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    arrays = [rng.standard_normal((2, c, 23)).astype("float32"),
              rng.standard_normal((f, c // groups, k)).astype("float32")]
    got, _ = run_on_device(("conv1d", *key), arrays, lambda o: data.draw(st.sampled_from(list(o))), cores)
    tvm.testing.assert_allclose(got, np_conv1d(*arrays, stride, pads, dilation, groups), rtol=1e-4, atol=1e-4)


def test_conv1d_runs_on_the_conv_templates() -> None:
    """A 1-D convolution is the conv2d implicit GEMM with one spatial axis; one filter per
    channel (depthwise) runs on the vector unit, like a depthwise conv2d."""
    grouped = extract_op(_conv1d_func(6, 9, 3, 1, (1, 1), 1, 3)).expr
    assert grouped.kind == "conv2d"
    assert [a.name for a in grouped.axes] == ["nn", "g", "f", "yy", "rc", "ry"]
    assert str(grouped.inputs[0].indices[2]) == "yy + ry - 1"
    depthwise = extract_op(_conv1d_func(6, 6, 3, 2, (0, 2), 2, 6)).expr
    assert depthwise.kind == "depthwise_conv2d"
    assert str(depthwise.inputs[0].indices[2]) == "yy*2 + ry*2"
