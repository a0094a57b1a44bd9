"""Resize on the chip (tvm_icca.frontend.resize_rewrites, tvm_icca.frontend.onnx_resize,
tvm_icca.ops.resize).

The per-axis tables against values worked out by hand from the ONNX specification's
formulas; ``resize2d`` in both layouts, both float dtypes, up and down, by integer and
non-integer factors, compiled with ``tvm.compile(target="icca")`` and run on the functional
device against ``onnx.reference.ReferenceEvaluator``; every node test case of ``Resize`` in the
installed onnx package, either exact on the chip or refused with the attribute named; and a
small upsampling decoder (Conv, nearest x2, Conv, bilinear, Conv) with nothing but integer
arithmetic on the host, on the functional device and in the timing simulator.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings

import ml_dtypes
import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.frontend.resize_rewrites import (
    axis_resizes,
    cubic_taps,
    linear_taps,
    nearest_indices,
    source_coordinates,
)
from tvm_icca.testing.device_runs import reference_build
from tvm_icca.testing.onnx_node_cases import inputs_as_initializers

# onnx's collect_testcases() builds every node case once per process: one xdist group with
# the other modules that read it (tests/test_onnx_fallback.py)
pytestmark = pytest.mark.xdist_group("onnx_node_cases")

op = relax.op
# A small chip keeps plans multi-core on tiny tensors: 16 cores of 16 KiB.
HW = small_chip(16, 16 * 1024)
RNG = np.random.default_rng(42)
#: float32 against onnx.reference's float64 interpolation rounded once: the chip rounds the
#: product and the two-term sum of each axis (a few units in the last place).
FP32 = {"rtol": 1e-5, "atol": 1e-6}
#: float16: the same roundings at float16's precision (2**-11 relative), on values of size ~3.
FP16 = {"rtol": 4e-3, "atol": 4e-3}


# -- the tables (ONNX Resize, coordinate transformation and nearest modes) ----------------------
@pytest.mark.parametrize("mode, n, m, scale, roi, want", [
    ("half_pixel", 2, 4, None, (0, 1), [-0.25, 0.25, 0.75, 1.25]),
    ("align_corners", 3, 5, None, (0, 1), [0, 0.5, 1, 1.5, 2]),
    ("align_corners", 3, 1, None, (0, 1), [0]),
    ("asymmetric", 2, 4, None, (0, 1), [0, 0.5, 1, 1.5]),
    ("pytorch_half_pixel", 4, 1, None, (0, 1), [0]),
    ("pytorch_half_pixel", 4, 2, None, (0, 1), [0.5, 2.5]),
    ("tf_half_pixel_for_nn", 2, 4, None, (0, 1), [0.25, 0.75, 1.25, 1.75]),
    # scale 0.6 of 4 is 2.4 long, rounded down to 2: the window is centred by 4/2 * (1 - 2/2.4)
    ("half_pixel_symmetric", 4, 2, 0.6, (0, 1), [2 / 3, 7 / 3]),
    ("half_pixel_symmetric", 4, 2, None, (0, 1), [0.5, 2.5]),
    ("tf_crop_and_resize", 4, 3, None, (0.4, 0.6), [1.2, 1.5, 1.8]),
])
def test_source_coordinates_follow_the_specification(mode, n, m, scale, roi, want) -> None:
    np.testing.assert_allclose(source_coordinates(mode, n, m, scale=scale, roi=roi), want,
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode, want", [
    ("round_prefer_floor", [0, 0, 1, 2, 3, 3]),
    ("round_prefer_ceil", [0, 1, 2, 3, 3, 3]),
    ("floor", [0, 0, 1, 2, 2, 3]),
    ("ceil", [0, 1, 2, 3, 3, 3]),
    ("round", [0, 0, 2, 2, 3, 3]),  # resize2d's own: half to even, as TVM's round
])
def test_nearest_indices_round_by_mode_and_clamp(mode, want) -> None:
    coords = np.array([-0.25, 0.5, 1.5, 2.5, 2.7, 3.0])
    assert nearest_indices(coords, mode, 4).tolist() == want


def test_linear_taps_weigh_two_neighbours_and_merge_clamped_ones() -> None:
    ids, weights = linear_taps(np.array([-0.25, 0.5, 2.0, 2.75]), 3)
    assert ids.tolist() == [[0, 0], [0, 1], [2, 2], [2, 2]]
    assert weights.tolist() == [[1, 0], [0.5, 0.5], [1, 0], [1, 0]]


def test_cubic_taps_weigh_four_neighbours_by_the_kernel() -> None:
    """At r = 0.5 the kernel with a = -0.75 weighs distances 1.5 and 0.5 by -0.09375 and
    0.59375 (ONNX Resize's polynomials, worked by hand); the tap at -1 reads the edge and is
    merged into the tap at 0. A whole coordinate reads one input."""
    ids, weights = cubic_taps(np.array([0.5, 2.0]), 4)
    assert ids.tolist() == [[0, 0, 1, 2], [1, 2, 3, 3]]
    assert weights.tolist() == [[0.5, 0, 0.59375, -0.09375], [0, 1, 0, 0]]
    # exclude_outside: the tap at -1 weighs 0, the others are scaled by 1 / 1.09375
    ids, weights = cubic_taps(np.array([0.5]), 4, exclude_outside=True)
    np.testing.assert_allclose(weights, [[0.59375 / 1.09375, 0, 0.59375 / 1.09375,
                                          -0.09375 / 1.09375]], rtol=1e-15)
    # a = -0.5 (Keys): distances 1.25, 0.25, 0.75, 1.75 at r = 0.25
    _, weights = cubic_taps(np.array([1.25]), 4, coeff_a=-0.5)
    np.testing.assert_allclose(weights, [[-0.0703125, 0.8671875, 0.2265625, -0.0234375]], rtol=1e-15)


@pytest.mark.parametrize("method, mode, nearest, n, m, kind, factor", [
    ("nearest", "half_pixel", "round_prefer_floor", 4, 8, "repeat", 2),
    ("nearest", "asymmetric", "floor", 3, 9, "repeat", 3),
    ("nearest", "asymmetric", "floor", 8, 4, "slice", 2),
    ("nearest", "half_pixel", "round_prefer_floor", 8, 4, "slice", 2),
    ("nearest", "half_pixel", "floor", 4, 8, "gather", 1),  # [0,0,0,1,1,2,2,3]: not x // 2
    ("nearest", "half_pixel", "round_prefer_floor", 2, 7, "gather", 1),
    ("nearest", "tf_half_pixel_for_nn", "round_prefer_ceil", 4, 4, "gather", 1),  # shifted by one
    ("linear", "half_pixel", "", 4, 8, "taps", 1),
    ("linear", "asymmetric", "", 8, 4, "slice", 2),  # every source coordinate is whole
    ("linear", "align_corners", "", 4, 4, "identity", 1),
    ("cubic", "half_pixel", "", 4, 8, "taps", 1),
    ("cubic", "asymmetric", "", 8, 4, "slice", 2),  # whole coordinates: one tap of weight 1
])
def test_each_axis_is_read_the_cheapest_way(method, mode, nearest, n, m, kind, factor) -> None:
    (read,) = axis_resizes([n], [m], [2], method, mode, nearest, [(0.0, 1.0)])
    assert (read.kind, read.factor) == (kind, factor)


# -- resize2d on the chip ---------------------------------------------------------------------------
def _resize_module(shape, size, method, mode, nearest="round_prefer_floor", layout="NCHW",
                   dtype="float32", **attrs) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(op.image.resize2d(
                x, size, layout=layout, method=method, coordinate_transformation_mode=mode,
                rounding_method=nearest, **attrs))
        bb.emit_func_output(out)
    return bb.get()


def _onnx_resize(x_nchw: np.ndarray, size, method, mode, nearest, **attrs) -> np.ndarray:
    """What ONNX Resize gives (onnx.reference) for the NCHW data and spatial sizes."""
    sizes = numpy_helper.from_array(np.array([*x_nchw.shape[:2], *size], np.int64), "sizes")
    node = helper.make_node("Resize", ["X", "", "", "sizes"], ["Y"], mode=method,
                            coordinate_transformation_mode=mode, nearest_mode=nearest, **attrs)
    graph = helper.make_graph(
        [node], "resize", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_nchw.shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], [sizes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (y,) = ReferenceEvaluator(model).run(None, {"X": x_nchw.astype(np.float32)})
    return y


def _on_chip(mod: tvm.IRModule, *inputs: np.ndarray) -> np.ndarray:
    with tvm_icca.use_hardware(HW):
        executable = tvm.compile(mod, target="icca")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()
    assert tvm_icca.last_run_stats()["regions_executed"] >= 1
    return out


def _device_labels(mod: tvm.IRModule) -> list[str]:
    compiled = tvm_icca.compile_programs(mod, HW, jobs=1, progress=False)
    return [o.label.split(" [")[0] for p in compiled.programs for o in p.ops]


RESIZES = {
    # name: (shape, size, method, mode, nearest mode, layout, dtype, device operators)
    "nearest_x2": ((1, 2, 3, 4), (6, 8), "nearest_neighbor", "half_pixel", "round_prefer_floor",
                   "NCHW", "float32", ["repeat twice"]),
    "nearest_x2_x3_nhwc": ((1, 3, 2, 5), (6, 4), "nearest_neighbor", "asymmetric", "floor",
                           "NHWC", "float32", ["repeat twice"]),
    "nearest_non_integer": ((1, 2, 3, 4), (5, 7), "nearest_neighbor", "half_pixel",
                            "round_prefer_ceil", "NCHW", "float32", ["take", "take"]),
    "nearest_down_x2": ((1, 2, 8, 6), (4, 3), "nearest_neighbor", "asymmetric", "floor", "NCHW",
                        "float32", ["strided slice"]),
    # 5 -> 3 at align_corners reads 0, 2, 4: a slice
    "nearest_ceil_align_corners": ((1, 1, 4, 5), (7, 3), "nearest_neighbor", "align_corners",
                                   "ceil", "NCHW", "float32", ["take", "strided slice"]),
    "bilinear_x2": ((1, 2, 3, 4), (6, 8), "linear", "half_pixel", "round_prefer_floor", "NCHW",
                    "float32", ["take", "tap sum", "take", "tap sum"]),
    "bilinear_down_non_integer": ((1, 2, 5, 6), (3, 4), "linear", "pytorch_half_pixel",
                                  "round_prefer_floor", "NCHW", "float32",
                                  ["take", "tap sum", "take", "tap sum"]),
    "bilinear_align_corners_nhwc": ((1, 3, 4, 2), (7, 6), "linear", "align_corners",
                                    "round_prefer_floor", "NHWC", "float32",
                                    ["take", "tap sum", "take", "tap sum"]),
    "bilinear_x2_float16": ((1, 2, 3, 4), (6, 8), "linear", "half_pixel", "round_prefer_floor",
                            "NCHW", "float16", ["take", "tap sum", "take", "tap sum"]),
    # H 3 -> 5 reads 0, 0, 1, 1, 2 (a take), W 3 -> 6 reads x // 2 (a repeat)
    "nearest_float16_nhwc": ((1, 3, 3, 2), (5, 6), "nearest_neighbor", "asymmetric", "floor",
                             "NHWC", "float16", ["take", "repeat"]),
    "nearest_x2_bfloat16": ((1, 2, 3, 4), (6, 8), "nearest_neighbor", "half_pixel",
                            "round_prefer_floor", "NCHW", "bfloat16", ["repeat twice"]),
}


def _numpy_dtype(dtype: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


@pytest.mark.parametrize("name", list(RESIZES))
def test_resize2d_on_the_chip_matches_onnx_reference(name) -> None:
    shape, size, method, mode, nearest, layout, dtype, device_ops = RESIZES[name]
    mod = _resize_module(shape, size, method, mode, nearest, layout, dtype)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, hw=HW))
    assert report["host_ops"] == {}
    assert sorted(_device_labels(mod)) == sorted(device_ops)
    x = (RNG.standard_normal(shape) * 3).astype(_numpy_dtype(dtype))
    got = _on_chip(mod, x)
    nchw = [layout.index(a) for a in "NCHW"]
    want = _onnx_resize(x.astype(np.float32).transpose(nchw), size,
                        "nearest" if method != "linear" else "linear", mode,
                        nearest).transpose(np.argsort(nchw))
    assert got.dtype == _numpy_dtype(dtype) and got.shape == want.shape
    if method != "linear":
        assert np.array_equal(got.astype(np.float32), want)  # nearest copies: exact
    else:
        np.testing.assert_allclose(got.astype(np.float64), want, **(FP32 if dtype == "float32" else FP16))


@pytest.mark.parametrize("shape, size, mode, alpha, exclude, layout", [
    ((1, 2, 4, 5), (8, 10), "half_pixel", -0.75, 0, "NCHW"),  # PyTorch's bicubic, x2
    ((1, 2, 4, 5), (7, 4), "align_corners", -0.75, 0, "NCHW"),
    ((1, 5, 6, 2), (4, 9), "pytorch_half_pixel", -0.5, 1, "NHWC"),
    ((1, 2, 3, 4), (8, 8), "asymmetric", -0.5, 1, "NCHW"),
])
def test_cubic_resize2d_on_the_chip_matches_onnx_reference(shape, size, mode, alpha, exclude,
                                                          layout) -> None:
    """Four taps per axis (a take and a tap sum each), with the node's cubic_coeff_a and
    exclude_outside, against onnx.reference's cubic Resize."""
    mod = _resize_module(shape, size, "cubic", mode, layout=layout, cubic_alpha=alpha,
                         cubic_exclude=exclude)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, hw=HW))
    assert report["host_ops"] == {}
    assert sorted(_device_labels(mod)) == ["take", "take", "tap sum", "tap sum"]
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    nchw = [layout.index(a) for a in "NCHW"]
    want = _onnx_resize(x.transpose(nchw), size, "cubic", mode, "round_prefer_floor",
                        cubic_coeff_a=alpha, exclude_outside=exclude).transpose(np.argsort(nchw))
    # the weights have both signs: rounding is relative to the largest product, not the result
    np.testing.assert_allclose(_on_chip(mod, x), want, rtol=1e-5, atol=1e-5)


def test_integer_nearest_upsampling_is_one_relayout_without_a_gather() -> None:
    """Scale 2 on both axes: one operator whose every tensor index is affine, the output
    written through ``h0*2 + h1`` -- the cost of a re-layout."""
    mod = _resize_module((1, 4, 6, 6), (12, 12), "nearest_neighbor", "half_pixel")
    (program,) = tvm_icca.compile_programs(mod, HW, jobs=1, progress=False).programs
    (device_op,) = program.ops
    expr = device_op.expr
    (x,) = expr.inputs
    assert expr.kind == "elementwise" and expr.body == {"op": "load", "input": 0,
                                                        "index": expr.body["index"]}
    assert x.gather is None and all(i.is_simple for i in x.indices)


@pytest.mark.parametrize("mode, nearest, rows", [
    # resize2d's own ``round`` (no ONNX mode): align_corners 3 -> 5 samples at 0, 0.5, 1,
    # 1.5, 2, whose halves go to the even neighbour
    ("align_corners", "round", [0, 0, 1, 2, 2]),
    # tf_half_pixel_for_nn (ONNX opsets 11-12; onnx.reference no longer reads it): 3 -> 5
    # samples at (x + 0.5) * 3/5 = 0.3, 0.9, 1.5, 2.1, 2.7
    ("tf_half_pixel_for_nn", "round_prefer_ceil", [0, 1, 2, 2, 2]),
])
def test_modes_onnx_reference_lacks_match_tvm(mode, nearest, rows) -> None:
    """Against TVM's llvm build of the same resize2d."""
    mod = _resize_module((1, 2, 3, 3), (5, 5), "nearest_neighbor", mode, nearest)
    x = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)
    want = relax.VirtualMachine(reference_build(mod), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.array_equal(_on_chip(mod, x), want)
    assert np.array_equal(want[0, 0, :, 0], x[0, 0, rows, 0])


@pytest.mark.parametrize("shape, size, method, mode, attrs, said", [
    ((1, 1, 4, 4), (3, 3), "linear", "tf_crop_and_resize",
     {"roi": (0.4, 0.6, 1.2, 1.7), "extrapolation_value": 10.0}, "extrapolation_value 10.0"),
    ((1, 1, 4, 4), (8, 8), "linear", "half_pixel", {"out_dtype": "float16"}, "out_dtype float16"),
    ((1, 1, 4, 4, 4), (8, 8), "linear", "half_pixel", {"layout": "NCHW4c"}, "layout 'NCHW4c'"),
])
def test_what_stays_on_the_host_is_reported_with_its_attribute(shape, size, method, mode, attrs,
                                                               said) -> None:
    mod = _resize_module(shape, size, method, mode, **attrs)
    part = tvm_icca.partition_for_icca(mod, hw=HW)
    report = tvm_icca.partition_report(part)
    assert report["host_ops"] == {"relax.image.resize2d": 1} and not report["regions"]
    (reason,) = report["host_reasons"]["relax.image.resize2d"]
    assert said in reason


def test_a_dynamic_shape_stays_on_the_host_with_a_reason() -> None:
    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 1, n, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(op.image.resize2d(x, (8, 8), method="linear"))
        bb.emit_func_output(out)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(bb.get(), hw=HW))
    assert report["host_reasons"]["relax.image.resize2d"] == ["resize2d of a tensor with a dynamic shape"]


# -- every ONNX node test case of Resize ------------------------------------------------------------
#: Case -> where it runs: "chip" (exact there), ("host", words of the partition report's
#: reason), ("import", words of load_onnx's ModelImportError: what TVM's importer would read
#: with another meaning).
NODE_CASES: dict[str, str | tuple[str, str]] = {
    "test_resize_downsample_scales_cubic": "chip",  # 0.8: written out (the sizes sample at 3/4)
    "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside": "chip",  # written out
    "test_resize_downsample_scales_cubic_align_corners": "chip",  # written out
    "test_resize_downsample_scales_cubic_antialias": ("import", "with antialias=1"),
    "test_resize_downsample_scales_linear": "chip",  # 0.6: written out (the sizes sample at 1/2)
    "test_resize_downsample_scales_linear_align_corners": "chip",  # written out
    "test_resize_downsample_scales_linear_antialias": ("import", "with antialias=1"),
    "test_resize_downsample_scales_linear_half_pixel_symmetric": "chip",  # written out
    "test_resize_downsample_scales_nearest": "chip",  # 0.6: the same pixels as the sizes' 1/2
    "test_resize_downsample_sizes_cubic": "chip",
    "test_resize_downsample_sizes_cubic_antialias": ("import", "with antialias=1"),
    "test_resize_downsample_sizes_linear_antialias": ("import", "with antialias=1"),
    "test_resize_downsample_sizes_linear_pytorch_half_pixel": "chip",
    "test_resize_downsample_sizes_nearest": "chip",
    "test_resize_downsample_sizes_nearest_not_larger": "chip",
    "test_resize_downsample_sizes_nearest_not_smaller": "chip",
    "test_resize_tf_crop_and_resize": "chip",
    "test_resize_tf_crop_and_resize_axes_2_3": "chip",
    "test_resize_tf_crop_and_resize_axes_3_2": "chip",
    "test_resize_tf_crop_and_resize_extrapolation_value": ("host", "extrapolation_value 10.0"),
    "test_resize_upsample_scales_cubic": "chip",
    "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside": "chip",
    "test_resize_upsample_scales_cubic_align_corners": "chip",
    "test_resize_upsample_scales_cubic_asymmetric": "chip",
    "test_resize_upsample_scales_linear": "chip",
    "test_resize_upsample_scales_linear_align_corners": "chip",
    "test_resize_upsample_scales_linear_half_pixel_symmetric": "chip",  # written out
    "test_resize_upsample_scales_nearest": "chip",
    "test_resize_upsample_scales_nearest_axes_2_3": "chip",
    "test_resize_upsample_scales_nearest_axes_3_2": "chip",
    "test_resize_upsample_sizes_cubic": "chip",
    "test_resize_upsample_sizes_nearest": "chip",
    "test_resize_upsample_sizes_nearest_axes_2_3": "chip",
    "test_resize_upsample_sizes_nearest_axes_3_2": "chip",
    "test_resize_upsample_sizes_nearest_ceil_half_pixel": "chip",
    "test_resize_upsample_sizes_nearest_floor_align_corners": "chip",
    "test_resize_upsample_sizes_nearest_not_larger": "chip",
    "test_resize_upsample_sizes_nearest_not_smaller": "chip",
    "test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric": "chip",
}


@functools.lru_cache(maxsize=1)
def _resize_cases() -> dict:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # the cases' own numpy (inf, nan, casts) warns
        warnings.simplefilter("ignore")
        # every case, not collect_testcases("Resize"): onnx keeps one list per process, which
        # a filtered first call would leave holding only these for the other modules
        return {c.name: c for c in collect_testcases() if c.name.startswith("test_resize_")}


def test_the_table_lists_every_resize_case() -> None:
    assert sorted(_resize_cases()) == sorted(NODE_CASES)


def _import(model: onnx.ModelProto) -> tvm.IRModule:
    with contextlib.redirect_stderr(io.StringIO()):  # TVM's importer prints its warnings
        return tvm_icca.load_onnx(model)


@pytest.mark.parametrize("name", sorted(NODE_CASES))
def test_onnx_resize_case_is_exact_on_the_chip_or_refused_by_name(name) -> None:
    case = _resize_cases()[name]
    inputs, (expected,) = case.data_sets[0]
    x = np.asarray(inputs[0])
    # roi, scales and sizes are constants of the model, as an exporter writes them
    model, values = inputs_as_initializers(case.model, [np.asarray(a) for a in inputs],
                                           lambda value: value is not inputs[0])
    fate = NODE_CASES[name]
    if fate != "chip" and fate[0] == "import":
        with pytest.raises(tvm_icca.ModelImportError, match=fate[1]):
            _import(model)
        return
    mod = _import(model)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, hw=HW))
    if fate != "chip":
        assert report["host_ops"] == {"relax.image.resize2d": 1}
        (reason,) = report["host_reasons"]["relax.image.resize2d"]
        assert fate[1] in reason
        return
    assert report["host_ops"] == {}
    got = _on_chip(mod, *values)
    assert got.shape == np.asarray(expected).shape and values[0] is x
    np.testing.assert_allclose(got, expected, **FP32)


def _resize_model(shape, scales, **attrs) -> onnx.ModelProto:
    node = helper.make_node("Resize", ["X", "", "scales"], ["Y"], **attrs)
    out = [int(np.floor(n * np.float32(s))) for n, s in zip(shape, scales)]
    graph = helper.make_graph(
        [node], "resize", [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(np.array(scales, np.float32), "scales")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("mode, scales", [("linear", [1, 1, 1.7, 0.7]),
                                          ("nearest", [1, 1, 2.5, 1.3])])
def test_scales_the_sizes_do_not_carry_are_written_out_and_exact(mode, scales) -> None:
    """5 * 1.7 = 8.5 and 6 * 0.7 = 4.2 (5 * 2.5 = 12.5, 6 * 1.3 = 7.8): resize2d would sample
    at 8/5 and 4/6 (12/5, 7/6); the node is written out as takes (and tap sums) at its own
    scales instead, with no resize left."""
    model = _resize_model([1, 2, 5, 6], scales, mode=mode)
    mod = _import(model)
    assert "resize2d" not in mod.script()
    assert tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, hw=HW))["host_ops"] == {}
    x = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"X": x})
    got = _on_chip(mod, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, **FP32)


def _bicubic_export(exporter: str, scale: float, side: int) -> onnx.ModelProto:
    """``F.interpolate(conv(x), scale_factor=scale, mode="bicubic")`` as torch's exporters
    write it: one Resize of constant scales ``[1, 1, s, s]``, mode cubic, half_pixel,
    cubic_coeff_a -0.75, nearest_mode floor; the dynamo exporter (opset 20) writes every
    other attribute out too, at its default, the TorchScript exporter (opset 17) does not."""
    rng = np.random.default_rng(5)
    attrs = {"mode": "cubic", "coordinate_transformation_mode": "half_pixel",
             "cubic_coeff_a": -0.75, "nearest_mode": "floor"}
    if exporter == "dynamo":
        attrs.update(keep_aspect_ratio_policy="stretch", antialias=0, extrapolation_value=0.0,
                     exclude_outside=0)
    out = int(np.floor(side * scale))
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "scales")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "scales"], ["y"], **attrs)]
    graph = helper.make_graph(
        nodes, "bicubic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, out, out])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20 if exporter == "dynamo" else 17)])


@pytest.mark.parametrize("exporter, scale, side", [("torchscript", 2.0, 6), ("dynamo", 2.0, 6),
                                                   ("dynamo", 1.5, 5)])
def test_pytorch_bicubic_exports_run_on_the_chip(exporter, scale, side) -> None:
    """torch's bicubic upsampling on the chip with no float op on the host, as exported (5 *
    1.5 = 7.5: written out at the node's scale, the sizes would sample at 7/5)."""
    model = _bicubic_export(exporter, scale, side)
    mod = _import(model)
    assert ("resize2d" in mod.script()) == (scale == 2.0)
    assert tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, hw=HW))["host_ops"] == {}
    x = RNG.standard_normal((1, 3, side, side)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(_on_chip(mod, x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fold_constants", [True, False])
def test_the_callers_model_is_left_as_it_was(fold_constants) -> None:
    model = _resize_model([1, 2, 5, 6], [1, 1, 1.7, 0.7], mode="linear")
    before = model.SerializeToString()
    with contextlib.redirect_stderr(io.StringIO()):
        tvm_icca.load_onnx(model, fold_constants=fold_constants)
    assert model.SerializeToString() == before


def test_a_batch_resize_is_refused_at_import() -> None:
    model = _resize_model([1, 2, 3, 3], [2, 1, 1, 1], mode="nearest")
    with pytest.raises(tvm_icca.ModelImportError, match=r"resizes axis 0 \(batch\) from 1 to 2"):
        _import(model)


# -- an upsampling decoder ----------------------------------------------------------------------------
def _decoder() -> onnx.ModelProto:
    """Conv -> Resize nearest x2 (scales) -> Conv -> Resize bilinear half_pixel (sizes) -> Conv,
    the upsampling path of a segmentation head or U-Net, with ReLUs."""
    rng = np.random.default_rng(3)
    c = 4

    def conv(name, cin, cout):
        w = numpy_helper.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32), f"{name}_w")
        b = numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"{name}_b")
        return [w, b]

    inits = [*conv("c1", 3, c), *conv("c2", c, c), *conv("c3", c, 2),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "x2"),
             numpy_helper.from_array(np.array([1, c, 13, 13], np.int64), "to13")]
    nodes = [
        helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["a1"]),
        helper.make_node("Resize", ["a1", "", "x2"], ["u1"], mode="nearest"),
        helper.make_node("Conv", ["u1", "c2_w", "c2_b"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["b"], ["b1"]),
        helper.make_node("Resize", ["b1", "", "", "to13"], ["u2"], mode="linear",
                         coordinate_transformation_mode="half_pixel"),
        helper.make_node("Conv", ["u2", "c3_w", "c3_b"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 13, 13])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_upsampling_decoder_runs_on_the_chip_and_in_the_timing_simulator() -> None:
    model = _decoder()
    mod = _import(model)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(mod, hw=HW))
    assert report["host_ops"] == {}  # not a float op on the host
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(_on_chip(mod, x), want, rtol=1e-4, atol=1e-5)  # conv sums reorder
    compiled = tvm_icca.compile_programs(mod, HW, jobs=1, progress=False)
    labels = [o.label for p in compiled.programs for o in p.ops]
    assert any(label.startswith("repeat twice") for label in labels)
    assert sum(label.startswith("tap sum") for label in labels) == 2
    timing = compiled.simulate()
    assert timing.total_s > 0 and len(timing.per_op) == len(labels)
