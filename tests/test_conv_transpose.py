"""Transposed convolutions on the chip as the convolutions of their output phases
(:mod:`tvm_icca.ops.conv_transpose`).

The phases of one axis are checked exhaustively against the definition (pure numpy); the
ONNX project's ConvTranspose node cases, a sweep of attribute combinations and a small
decoder run on the functional device of a 16-core chip against independent references: the
cases' expected outputs, ``onnx.reference.ReferenceEvaluator`` and a numpy scatter that is
the ONNX specification's definition (the reference evaluator computes only a depthwise
``group`` right: it reshapes the whole kernel to one group's shape).
"""

from __future__ import annotations

import contextlib
import io
import itertools

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import small_chip
from runtime_sim.run_stats import last_run_timing
from tvm_icca.ops.conv_transpose import AxisPhases, axis_phases
from tvm_icca.partition.partitioner import icca_regions
from tvm_icca.testing.onnx_node_cases import node_cases
from tvm_icca.testing.relax_functions import relax_function

# A small chip keeps plans multi-core on these tiny tensors: 16 cores of 16 KiB.
HW = small_chip(16, 16 * 1024)


# -- the definition -----------------------------------------------------------------------------
def scatter_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, strides, pads,
                      dilations, output_padding, group: int) -> np.ndarray:
    """ConvTranspose as the ONNX specification defines it, in float64: every input element
    times every tap, added at ``i * stride + t * dilation - pad_begin`` when that is inside the
    output. ``pads`` is ``[begins..., ends...]``; ``w`` is ``[C, F/group, k...]``."""
    spatial = x.ndim - 2
    c, f_group, kernel = w.shape[0], w.shape[1], w.shape[2:]
    out = [strides[a] * (x.shape[2 + a] - 1) + dilations[a] * (kernel[a] - 1) + 1 + output_padding[a]
           - pads[a] - pads[spatial + a] for a in range(spatial)]
    y = np.zeros((x.shape[0], f_group * group, *out))
    xg = x.astype(np.float64).reshape(x.shape[0], group, c // group, *x.shape[2:])
    wg = w.astype(np.float64).reshape(group, c // group, f_group, *kernel)
    for pos in np.ndindex(*x.shape[2:]):
        for tap in np.ndindex(*kernel):
            o = [pos[a] * strides[a] + tap[a] * dilations[a] - pads[a] for a in range(spatial)]
            if all(0 <= o[a] < out[a] for a in range(spatial)):
                part = np.einsum("ngc,gcf->ngf", xg[(..., *pos)], wg[(..., *tap)])
                y[(slice(None), slice(None), *o)] += part.reshape(x.shape[0], -1)
    if bias is not None:
        y += bias.reshape(1, -1, *[1] * spatial)
    return y


# -- one axis: the phases against the definition (numpy, exhaustive over small sizes) ----------
def _from_phases(x: np.ndarray, w: np.ndarray, ax: AxisPhases) -> np.ndarray:
    """1-D single-channel ``x`` transposed-convolved by ``w`` through ``ax``'s runs: each phase
    a stride-1 convolution of the cropped, padded input with its taps, then interleaved."""
    y = np.zeros((ax.stride, ax.rows))
    for run in ax.runs:
        if run.empty:
            continue
        xs = np.pad(x[run.crop[0]:len(x) - run.crop[1]], run.pad)
        for p, taps in enumerate(run.taps):
            for q in range(ax.rows):
                y[run.first + p, q] = sum(xs[q + j * run.dilation] * w[t] for j, t in enumerate(taps))
    return y.T.reshape(-1)[:ax.out_size]


def test_axis_phases_are_the_definition():
    rng = np.random.default_rng(0)
    checked = 0
    for size, kernel, stride, dilation in itertools.product((1, 3), range(1, 5), range(1, 5), range(1, 4)):
        edge = range(-2, min(kernel * dilation, 4))  # pads from a negative one to beyond the kernel
        for pb, pe, op in itertools.product(edge, edge, range(stride)):
            ax = axis_phases(size, kernel, stride, dilation, (pb, pe), op)
            if ax.out_size < 1:
                continue
            x, w = rng.standard_normal(size), rng.standard_normal(kernel)
            want = np.zeros(ax.out_size)  # the definition, on one axis
            for i, t in itertools.product(range(size), range(kernel)):
                if 0 <= i * stride + t * dilation - pb < ax.out_size:
                    want[i * stride + t * dilation - pb] += x[i] * w[t]
            np.testing.assert_allclose(_from_phases(x, w, ax), want, atol=1e-12)
            assert dilation > 1 or len(ax.runs) <= 4  # the module docstring's bound
            checked += 1
    assert checked > 1000


@pytest.mark.parametrize("kernel,stride,pad,runs,counts", [
    (2, 2, 0, 1, [2]),  # U-Net's up-convolution: both phases read one window, one convolution
    (4, 2, 1, 2, [1, 1]),  # DCGAN: the phases' windows are one row apart
    (3, 2, 1, 2, [1, 1]),  # 2 taps and 1 tap
    (1, 2, 0, 2, [1, 1]),  # the odd phase has no tap
    (64, 32, 16, 2, [16, 16]),  # FCN's bilinear upsampling: 32 phases, two convolutions
])
def test_runs_merge_phases_of_one_window(kernel, stride, pad, runs, counts):
    ax = axis_phases(8, kernel, stride, 1, (pad, pad), 0)
    assert len(ax.runs) == runs and [r.count for r in ax.runs] == counts
    # every tap belongs to exactly one phase
    assert sorted(t for r in ax.runs for taps in r.taps for t in taps) == list(range(kernel))
    assert [r.empty for r in ax.runs] == [False] + [kernel < stride] * (runs - 1)


# -- compiling ONNX models ------------------------------------------------------------------------
def _compile_and_run(model: onnx.ModelProto, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], dict]:
    with contextlib.redirect_stderr(io.StringIO()):
        mod = tvm_icca.load_onnx(model)
    partitioned = tvm_icca.partition_for_icca(mod, hw=HW)
    report = tvm_icca.partition_report(partitioned)
    vm = relax.VirtualMachine(tvm_icca.compile(partitioned, HW), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs])
    outs = [out] if hasattr(out, "numpy") else list(out)
    return [o.numpy() for o in outs], report


# -- the ONNX project's node cases ------------------------------------------------------------------
#: Cases left on the host, and what the partition report says about them.
ON_HOST = {"test_convtranspose_3d": "no ICCA implementation"}  # 3-D: nor has Conv
CASES = ["test_convtranspose", "test_convtranspose_1d", "test_convtranspose_3d",
         "test_convtranspose_autopad_same", "test_convtranspose_dilations",
         "test_convtranspose_group_2", "test_convtranspose_group_2_image_3",
         "test_convtranspose_kernel_shape", "test_convtranspose_output_shape",
         "test_convtranspose_pad", "test_convtranspose_pads"]


def test_every_node_case_is_listed():
    assert list(node_cases("ConvTranspose")) == CASES


@pytest.mark.parametrize("name", CASES)
def test_onnx_node_case(name):
    case = node_cases("ConvTranspose")[name]
    inputs, expected = case.data_sets[0]
    got, report = _compile_and_run(case.model, list(inputs))
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-5)
    if name in ON_HOST:
        [reason] = [r for rs in report["host_reasons"].values() for r in rs]
        assert reason == ON_HOST[name]
        return
    assert not report["host_ops"], report["host_reasons"]
    offloaded = report["offloaded_ops"]
    assert offloaded.get("relax.nn.conv2d", 0) + offloaded.get("relax.nn.conv1d", 0) >= 1
    assert tvm_icca.last_run_stats()["regions_executed"] == 1


# -- a sweep of the attributes ---------------------------------------------------------------------
def _conv_transpose_model(x_shape, w_shape, attrs: dict, bias: bool, dtype: str,
                          weight_input: bool, seed: int = 0):
    """A one-node ConvTranspose model, its inputs, and the initializer values."""
    elem = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}[dtype]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(dtype) if bias else None
    names = ["X", "W"] + (["B"] if bias else [])
    node = helper.make_node("ConvTranspose", names, ["Y"], **attrs)
    graph_inputs = [helper.make_tensor_value_info("X", elem, x_shape)]
    inits = []
    if weight_input:
        graph_inputs.append(helper.make_tensor_value_info("W", elem, w_shape))
    else:
        inits.append(numpy_helper.from_array(w, "W"))
    if b is not None:
        inits.append(numpy_helper.from_array(b, "B"))
    graph = helper.make_graph([node], "convt", graph_inputs,
                              [helper.make_tensor_value_info("Y", elem, [None] * len(x_shape))],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return model, [x, w] if weight_input else [x], (x, w, b)


#: (input shape, kernel shape, attributes): stride, pads, output_padding, dilation, group,
#: kernel size, with the interleave's three layouts (one convolution; phases concatenated on
#: the channels; runs concatenated on the phase axes) and 1-D.
SWEEP = [
    ((1, 3, 4, 4), (3, 2, 2, 2), {"strides": [2, 2]}),
    ((2, 2, 4, 3), (2, 3, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 3, 4), (2, 2, 3, 3), {"strides": [2, 3], "pads": [1, 0, 2, 1], "output_padding": [1, 2]}),
    ((1, 2, 4, 4), (2, 2, 3, 2), {"strides": [3, 2], "dilations": [2, 1], "pads": [2, 1, 0, 0]}),
    ((1, 4, 4, 4), (4, 1, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 4}),
    ((1, 4, 3, 3), (4, 3, 4, 3), {"strides": [2, 3], "pads": [0, 1, 1, 0], "group": 2}),
    ((1, 4, 4, 4), (4, 1, 2, 2), {"strides": [2, 2], "group": 4}),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [2, 2]}),
    ((1, 2, 3, 3), (2, 2, 1, 1), {"strides": [3, 2], "output_padding": [2, 1]}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 7]}),
    ((1, 2, 6), (2, 3, 4), {"strides": [2], "pads": [1, 1]}),
    ((1, 4, 5), (4, 2, 5), {"strides": [3], "pads": [2, 0], "output_padding": [1], "group": 2,
                            "dilations": [2]}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", SWEEP, ids=[str(i) for i in range(len(SWEEP))])
def test_sweep_against_the_definition(x_shape, w_shape, attrs):
    bias = len(x_shape) == 4 and x_shape[1] != 4  # a bias on most 2-D cases
    weight_input = attrs.get("group", 1) == 2  # the kernel as an input: rearranged on the chip
    model, inputs, (x, w, b) = _conv_transpose_model(x_shape, w_shape, attrs, bias, "float32", weight_input)
    got, report = _compile_and_run(model, inputs)
    assert not report["host_ops"], report["host_reasons"]
    spatial, group = len(x_shape) - 2, attrs.get("group", 1)

    def reference() -> np.ndarray:
        return ReferenceEvaluator(model).run(None, dict(zip(["X", "W"], inputs)))[0]

    if "output_shape" in attrs or "auto_pad" in attrs:
        want = reference()  # the pads the spec derives from them, as onnx reads it (group 1)
    else:
        want = scatter_reference(x, w, b, attrs["strides"], attrs.get("pads", [0] * 2 * spatial),
                                 attrs.get("dilations", [1] * spatial),
                                 attrs.get("output_padding", [0] * spatial), group)
        if group == 1 or w_shape[1] == 1:  # where onnx's reference computes groups right
            np.testing.assert_allclose(reference(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)


def test_float16():
    attrs = {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}
    model, inputs, (x, w, b) = _conv_transpose_model((1, 4, 3, 3), (4, 4, 3, 3), attrs, True, "float16", False)
    got, report = _compile_and_run(model, inputs)
    assert not report["host_ops"] and got[0].dtype == np.float16
    want = scatter_reference(x, w, b, [2, 2], [1, 1, 1, 1], [1, 1], [1, 1], 1)
    # float16 products of 4 channels x up to 4 taps: a few ulps of the largest values
    np.testing.assert_allclose(got[0].astype(np.float64), want, rtol=1e-2, atol=2e-2)


# -- a decoder: nothing float left on the host, and the timing simulator runs it --------------------
def test_small_decoder_runs_on_the_chip():
    rng = np.random.default_rng(3)

    def init(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["h0"], pads=[1, 1, 1, 1]),
        helper.make_node("ConvTranspose", ["h0", "w1", "b1"], ["h1"], strides=[2, 2], pads=[1, 1, 1, 1],
                         kernel_shape=[4, 4]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("ConvTranspose", ["h2", "w2"], ["y"], strides=[2, 2], kernel_shape=[2, 2]),
    ]
    inits = [init("w0", (8, 4, 3, 3)), init("b0", (8,)), init("w1", (8, 4, 4, 4)), init("b1", (4,)),
             init("w2", (4, 2, 2, 2))]
    graph = helper.make_graph(nodes, "decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    x = rng.standard_normal((1, 4, 4, 4)).astype(np.float32)
    got, report = _compile_and_run(model, [x])
    assert not report["host_ops"], report["host_reasons"]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got[0].shape == (1, 2, 16, 16)
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    timing = last_run_timing()
    stats = tvm_icca.last_run_stats()
    assert stats["simulated_s"] == pytest.approx(timing.total_s) and timing.total_s > 0
    conv_flops = sum(op.flops for op in timing.per_op if op.kind == "conv2d")
    # 2 FLOPs per multiply-add: the Conv's 16 outputs x 8 x 4 channels x 9 taps, then each
    # ConvTranspose's input elements x channels x taps (each tap meets each element once)
    assert conv_flops == 2 * (16 * 8 * 4 * 9 + 16 * 8 * 4 * 16 + 64 * 4 * 2 * 4)


# -- the phases do 1 / s^2 of the zero-inserted convolution's work ----------------------------------
def _relax_module(shapes, body) -> tvm.IRModule:
    return tvm.IRModule({"main": relax_function(shapes, body).with_attr("global_symbol", "main")})


def _relax_conv_transpose(x_shape, w_shape, **attrs) -> tvm.IRModule:
    w = relax.const(np.random.default_rng(0).standard_normal(w_shape).astype("float32"))
    return _relax_module([x_shape], lambda x: relax.op.nn.conv2d_transpose(x, w, **attrs))


def _convs(mod: tvm.IRModule) -> list[relax.Call]:
    found = []
    for func in icca_regions(mod).values():
        relax.analysis.post_order_visit(func, lambda n: found.append(n) if isinstance(n, relax.Call)
                                        and isinstance(n.op, tvm.ir.Op) and n.op.name == "relax.nn.conv2d"
                                        else None)
    return found


def test_phase_convolutions_do_no_zero_work():
    # DCGAN's up-sampling layer: k = 4, s = 2, p = 1, 4 -> 8 channels, 6x6 -> 12x12
    mod = _relax_conv_transpose((1, 4, 6, 6), (4, 8, 4, 4), strides=2, padding=1)
    partitioned = tvm_icca.partition_for_icca(mod, hw=HW)
    convs = _convs(partitioned)
    assert len(convs) == 4  # one per phase (their windows differ by a row)
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype("float32")
    vm = relax.VirtualMachine(tvm_icca.compile(partitioned, HW), tvm.cpu())
    vm["main"](tvm.runtime.tensor(x))
    conv_flops = sum(op.flops for op in last_run_timing().per_op if op.kind == "conv2d")
    exact = 2 * 4 * 8 * 6 * 6 * 16  # each input element times each tap, once
    zero_inserted = 2 * 8 * 4 * 12 * 12 * 16  # topi: every tap at every output position
    assert conv_flops == exact == zero_inserted // 4


def test_up_convolution_is_one_convolution():
    # U-Net's ConvTranspose2d(k=2, s=2): the four phases read one window -> one 1x1 conv
    mod = _relax_conv_transpose((1, 4, 6, 6), (4, 8, 2, 2), strides=2)
    [conv] = _convs(tvm_icca.partition_for_icca(mod, hw=HW))
    assert [int(d) for d in conv.args[1].ty.shape.values] == [32, 4, 1, 1]


# -- what stays on the host, and why ----------------------------------------------------------------
def test_layout_is_refused_with_its_name():
    mod = _relax_module([(1, 4, 4, 2), (2, 3, 3, 3)], lambda x, w: relax.op.nn.conv2d_transpose(
        x, w, strides=2, data_layout="NHWC"))
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, hw=HW))
    [reason] = report["host_reasons"]["relax.nn.conv2d_transpose"]
    assert reason.startswith("conv2d_transpose layout NHWC/IOHW->NHWC (only NCHW data")


def test_dtype_the_chip_lacks_is_refused():
    chip = HW.with_overrides(dtypes=("float32",))
    model, inputs, _ = _conv_transpose_model((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2]}, False,
                                             "float16", False)
    with contextlib.redirect_stderr(io.StringIO()):
        mod = tvm_icca.load_onnx(model)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, hw=chip))
    [reason] = report["host_reasons"]["relax.nn.conv2d_transpose"]
    assert "float16" in reason
