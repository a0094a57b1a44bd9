"""Resize (``relax.image.resize2d``, ONNX ``Resize``) as operators the chip already runs.

A resize computes little and moves much. Its meaning is separable (ONNX operator
specification, ``Resize``): along each resized axis, output position ``x`` samples the input
at the *source coordinate* ``x_original(x)`` the coordinate transformation mode gives, and
reads there either the nearest input position (``nearest``), or the two positions around it,
weighted (``linear``), or the four positions around it weighted by the cubic convolution
kernel (``cubic``, with the node's ``cubic_coeff_a`` and ``exclude_outside``). All depend on
the output position only: per axis, a constant table of source indices (``[out]`` for
nearest, ``[out, T]`` for ``T`` taps) and of weights (``[out, T]``), never a table over the
whole ``[H_out, W_out]`` plane. So

``out[.., y, x] = sum_a sum_b wh[y, a] * ww[x, b] * in[.., ih[y, a], iw[x, b]]``,

one axis at a time. :func:`decompose_resize` writes a resize so, in operators that are already
exact on the chip:

* an axis whose table is the identity is left alone;
* nearest upsampling by an integer factor ``k`` (``ids == x // k``: every ``k`` consecutive
  outputs copy one input, the common scale-2 case) is a ``relax.repeat``, an affine
  re-layout (:mod:`tvm_icca.ops.views`; the repeats of both axes are one operator);
* a table that reads every ``k``-th input (integer downsampling) is one ``strided_slice``;
* any other nearest table is a ``take`` of the axis by the constant table, a gathered read
  (:mod:`tvm_icca.ops.gather`);
* linear and cubic are a ``take`` by the ``[out, 2]`` or ``[out, 4]`` table, then the
  weighted sum over the tap axis, ``sum(taps * weights)``, one operator
  (:mod:`tvm_icca.ops.resize`).

Why a rewrite, and not the resize's own TE: TVM's TE of ``resize2d`` (``topi.image.resize``)
computes each source index as ``floor`` of a float expression of the output index, which no
affine (T10 §5) or piecewise-affine read (:mod:`tvm_icca.lower.te_pieces`) expresses, and a new
expression form would mean a new index kind in the device program format, both executors and
the plan rules. The tables are computed here, at compile time, once per resize; on the chip
every piece is a re-layout, a gather or an elementwise sum the format already has, and each
is exact.

The tables follow the ONNX specification's coordinate transformation modes and nearest
modes, computed in float64 as ``onnx.reference`` computes them, with ``scale =
out_size / in_size`` (``resize2d`` carries output sizes; :mod:`tvm_icca.frontend.onnx_resize`
makes sure what TVM's ONNX importer hands over means the node's scales). ``resize2d``'s
``round`` (not an ONNX mode) rounds half to even, as TVM's ``round`` does. TVM's own
legalization computes the coordinates in float32 and nudges ``floor``/``ceil`` by 1e-5: on a
coordinate within 1e-5 of an integer, or a rounding tie that float32 misses, TVM's host build
may pick the neighbouring pixel where this rewrite (and ONNX) does not.

Numerics: nearest, repeat, slice and take copy values exactly. The weighted sums round in
the data's dtype (each product, then the sum of the taps), against ``onnx.reference``'s
float64 sum rounded once: a float32 result is within a few units in the last place of the
largest term (cubic weights have both signs, so of the largest product, not of the
result). The weights themselves are computed in float64 as ``onnx.reference`` computes them,
then rounded to the data's dtype. Taps that read the same input (a clamped border) are
merged into one weight, and an axis whose every output reads one input with weight 1 (whole
source coordinates: ``asymmetric`` downsampling by 2) is read as nearest: its zero-weight
taps could only matter were they infinite or NaN.

Stays on the host, with the reason (:func:`resize_reason`): a ``tf_crop_and_resize`` that
samples outside its input (where it writes ``extrapolation_value``), dynamic shapes, a packed
or unknown layout, an ``out_dtype`` other than the data's, and non-float data. (An
``antialias`` downsampling is refused when the ONNX model is imported: ``resize2d`` has no
such attribute, :mod:`tvm_icca.frontend.onnx_resize`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.dpl import is_op, wildcard

from tvm_icca.frontend.rewrites import replacing_calls, rewrite_functions

__all__ = [
    "COORDINATE_MODES",
    "CUBIC_COEFF_A",
    "NEAREST_MODES",
    "AxisResize",
    "DecomposeResize",
    "axis_resizes",
    "cubic_taps",
    "decompose_resize",
    "linear_taps",
    "nearest_indices",
    "ordered_reads",
    "resize_reason",
    "source_coordinates",
]

#: Coordinate transformation modes (ONNX ``Resize``, opsets 11-19; ``tf_half_pixel_for_nn``
#: was removed in opset 13 and TVM still reads it).
COORDINATE_MODES: tuple[str, ...] = (
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_half_pixel_for_nn", "tf_crop_and_resize",
)
#: How ``nearest`` picks between the two input positions around a source coordinate: the
#: ONNX ``nearest_mode`` values, and ``resize2d``'s ``round`` (half to even).
NEAREST_MODES: tuple[str, ...] = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "round")
#: ``resize2d`` methods rewritten here -> the ONNX mode of the same name.
_METHODS = {"nearest_neighbor": "nearest", "linear": "linear", "cubic": "cubic"}
#: ONNX ``Resize``'s default ``cubic_coeff_a`` (PyTorch's bicubic uses it too; -0.5 is Keys'
#: kernel, R. Keys, "Cubic convolution interpolation for digital image processing", 1981).
CUBIC_COEFF_A = -0.75
_FLOAT_DTYPES = ("float32", "float16", "bfloat16")
_OP = "relax.image.resize2d"


# -- the per-axis tables (ONNX operator specification, Resize) ------------------------------
def source_coordinates(mode: str, in_size: int, out_size: int, scale: float | None = None,
                       roi: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """The source coordinate ``x_original`` of every output position ``0 .. out_size-1``.

    Follows the coordinate transformation modes of the ONNX ``Resize`` specification, in
    float64. ``scale`` is the node's scale on this axis; ``None`` means ``out_size /
    in_size`` (output sizes given, as ``resize2d`` always has). Where the specification
    uses the resized length, it is ``scale * in_size`` (a float when scales are given, the
    reading of ``onnx.reference``). ``roi`` is ``(start, end)`` on this axis, normalized,
    read by ``tf_crop_and_resize`` only.
    """
    x = np.arange(out_size, dtype=np.float64)
    if scale is None:
        scale, resized = out_size / in_size, float(out_size)
    else:
        scale = float(scale)
        resized = scale * in_size
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        # centre the sampled window when the output length was rounded down
        offset = in_size / 2 * (1 - out_size / resized)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_size > 1 else np.zeros(out_size)
    if mode == "align_corners":
        return x * (in_size - 1) / (resized - 1) if resized != 1 else np.zeros(out_size)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if mode == "tf_crop_and_resize":
        start, end = float(roi[0]), float(roi[1])
        if resized == 1:
            return np.full(out_size, (end - start) * (in_size - 1) / 2 + start * (in_size - 1))
        return x * (end - start) * (in_size - 1) / (resized - 1) + start * (in_size - 1)
    raise ValueError(f"unknown coordinate transformation mode {mode!r}")


def nearest_indices(coords: np.ndarray, nearest_mode: str, in_size: int) -> np.ndarray:
    """The input position ``nearest`` reads at each source coordinate: a coordinate that is
    an integer reads there, any other rounds by ``nearest_mode`` (:data:`NEAREST_MODES`),
    and positions outside the input read its edge (ONNX ``Resize``)."""
    low = np.floor(coords)
    frac = coords - low
    if nearest_mode == "round_prefer_floor":
        up = frac > 0.5
    elif nearest_mode == "round_prefer_ceil":
        up = frac >= 0.5
    elif nearest_mode == "floor":
        up = np.zeros(coords.shape, bool)
    elif nearest_mode == "ceil":
        up = frac > 0
    elif nearest_mode == "round":
        up = np.rint(coords) > low
    else:
        raise ValueError(f"unknown nearest mode {nearest_mode!r}")
    return np.clip(low + up, 0, in_size - 1).astype(np.int64)


def linear_taps(coords: np.ndarray, in_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The two input positions ``linear`` reads at each source coordinate and their
    weights, ``([out, 2] int64, [out, 2] float64)``: ``floor(c)`` and ``floor(c) + 1``
    weighted ``1 - r`` and ``r`` with ``r = c - floor(c)``, positions outside the input read
    at its edge (ONNX ``Resize``). Taps that read the same position are merged into the first
    (the second gets weight 0)."""
    low = np.floor(coords)
    frac = coords - low
    raw = np.stack([low, low + 1], axis=1)
    return _merged(np.clip(raw, 0, in_size - 1).astype(np.int64), np.stack([1 - frac, frac], axis=1))


def cubic_taps(coords: np.ndarray, in_size: int, coeff_a: float = CUBIC_COEFF_A,
               exclude_outside: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The four input positions ``cubic`` reads at each source coordinate and their
    weights, ``([out, 4] int64, [out, 4] float64)``.

    ONNX ``Resize`` with ``mode="cubic"``: positions ``floor(c) - 1 .. floor(c) + 2``
    weighted by the cubic convolution kernel with coefficient ``coeff_a``
    (``cubic_coeff_a``) at their distances ``1 + r, r, 1 - r, 2 - r`` from ``c``, ``r = c -
    floor(c)``, the polynomials written as ``onnx.reference`` evaluates them (in float64).
    Positions outside the input read at its edge; with ``exclude_outside`` they weigh 0
    instead and the others are scaled to sum to 1. Taps that read the same position are
    merged into the first of them.
    """
    low = np.floor(coords)
    r = coords - low
    a = float(coeff_a)

    def near(d: np.ndarray) -> np.ndarray:  # the kernel on |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:  # the kernel on 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    weights = np.stack([far(r + 1), near(r), near(1 - r), far((1 - r) + 1)], axis=1)
    raw = low[:, None] + np.arange(-1, 3)
    if exclude_outside:
        weights = np.where((raw < 0) | (raw > in_size - 1), 0.0, weights)
        weights = weights / weights.sum(axis=1, keepdims=True)
    return _merged(np.clip(raw, 0, in_size - 1).astype(np.int64), weights)


def _merged(ids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` (ascending along each row) and ``weights`` with the weight of every tap that
    reads the same position as the tap before it added to the first tap of that position,
    and made 0."""
    weights = weights.copy()
    rows = np.arange(len(ids))
    first = np.zeros(len(ids), dtype=np.int64)  # the first tap of each row's current position
    for tap in range(1, ids.shape[1]):
        same = ids[:, tap] == ids[:, tap - 1]
        weights[rows[same], first[same]] += weights[same, tap]
        weights[same, tap] = 0
        first = np.where(same, first, tap)
    return ids, weights


@dataclass(frozen=True)
class AxisResize:
    """How one axis of a resize reads its input.

    ``kind`` is ``"identity"``, ``"repeat"`` (``ids == x // factor``), ``"slice"``
    (``ids == start + x * factor``), ``"gather"`` (any other single read, by ``ids``) or
    ``"taps"`` (``ids [out, T]`` weighted by ``weights [out, T]``: two taps for linear, four
    for cubic).
    """

    axis: int
    in_size: int
    out_size: int
    kind: str
    ids: np.ndarray
    weights: np.ndarray | None = None
    factor: int = 1
    start: int = 0


def _classified(axis: int, in_size: int, ids: np.ndarray) -> AxisResize:
    """The cheapest read of a single-read table ``ids`` (see :class:`AxisResize`)."""
    out = len(ids)
    x = np.arange(out)
    if out == in_size and np.array_equal(ids, x):
        return AxisResize(axis, in_size, out, "identity", ids)
    if out % in_size == 0 and np.array_equal(ids, x // (out // in_size)):
        return AxisResize(axis, in_size, out, "repeat", ids, factor=out // in_size)
    step = int(ids[1] - ids[0]) if out > 1 else 1
    if step >= 1 and np.array_equal(ids, ids[0] + step * x):
        return AxisResize(axis, in_size, out, "slice", ids, factor=step, start=int(ids[0]))
    return AxisResize(axis, in_size, out, "gather", ids)


def axis_resizes(in_sizes: Sequence[int], out_sizes: Sequence[int], axes: Sequence[int],
                 method: str, coordinate_mode: str, nearest_mode: str,
                 rois: Sequence[tuple[float, float]],
                 scales: Sequence[float | None] | None = None, *,
                 cubic_coeff_a: float = CUBIC_COEFF_A,
                 exclude_outside: bool = False) -> list[AxisResize]:
    """The per-axis reads of a resize of axes ``axes`` from ``in_sizes`` to ``out_sizes``
    (``method`` ``"nearest"``, ``"linear"`` or ``"cubic"``, the latter with the ONNX
    attributes ``cubic_coeff_a`` and ``exclude_outside``; see the module), at ``scales`` (by
    default, and where one is ``None``, ``out / in``: :func:`source_coordinates`). A table of
    taps whose every output reads one input with weight 1 is read as nearest."""
    out = []
    scales = [None] * len(axes) if scales is None else scales
    for axis, n, m, roi, scale in zip(axes, in_sizes, out_sizes, rois, scales):
        # (an axis kept at its size is no special case: its table is the identity in every
        # mode but tf_half_pixel_for_nn and tf_crop_and_resize, which shift it)
        coords = source_coordinates(coordinate_mode, n, m, scale=scale, roi=roi)
        if method == "nearest":
            out.append(_classified(axis, n, nearest_indices(coords, nearest_mode, n)))
            continue
        if method == "linear":
            ids, weights = linear_taps(coords, n)
        elif method == "cubic":
            ids, weights = cubic_taps(coords, n, cubic_coeff_a, exclude_outside)
        else:
            raise ValueError(f"unknown resize method {method!r}")
        single = (np.count_nonzero(weights, axis=1) == 1) & (weights.max(axis=1) == 1)
        if np.all(single):
            out.append(_classified(axis, n, ids[np.arange(m), weights.argmax(axis=1)]))
        else:
            out.append(AxisResize(axis, n, m, "taps", ids, weights))
    return out


def ordered_reads(reads: Sequence[AxisResize]) -> tuple[list[AxisResize], list[AxisResize],
                                                         list[AxisResize]]:
    """The order a resize's axes are read in: the slices first (what only shrinks, one
    operator for all of them), then the gathered axes (``"gather"``, ``"taps"``), the one that
    grows the tensor least first, then the repeats (what only grows). Identity axes are not
    read. Each axis's table is a function of its own output position, so any order gives the
    same values; this one keeps the intermediate tensors smallest."""
    slices = [r for r in reads if r.kind == "slice"]
    gathered = sorted((r for r in reads if r.kind in ("gather", "taps")),
                      key=lambda r: r.out_size / r.in_size)
    return slices, gathered, [r for r in reads if r.kind == "repeat"]


# -- Relax ------------------------------------------------------------------------------------
def _static(shape: relax.Expr) -> list[int] | None:
    if not isinstance(shape, relax.ShapeExpr) or not all(
            isinstance(d, tvm.tirx.IntImm) for d in shape.values):
        return None
    return [int(d) for d in shape.values]


def _spatial_axes(layout: str) -> tuple[int, int] | None:
    """Positions of H and W in a plain 4-D layout (a permutation of ``NCHW``), else None."""
    if len(layout) != 4 or sorted(layout) != sorted("NCHW"):
        return None
    return layout.index("H"), layout.index("W")


@dataclass(frozen=True)
class _Resize:
    """A ``resize2d`` call read: its data, axes, sizes and modes."""

    data: relax.Expr
    dtype: str
    in_shape: list[int]
    axes: tuple[int, int]
    out_sizes: list[int]
    method: str
    coordinate_mode: str
    nearest_mode: str
    rois: tuple[tuple[float, float], tuple[float, float]]
    cubic_coeff_a: float
    exclude_outside: bool


def _read(call: relax.Call) -> _Resize | str:
    """The resize ``call`` read, or why it stays as it is."""
    attrs = call.attrs
    data, size = call.args[0], call.args[1]
    method = str(attrs.method)
    if method not in _METHODS:
        return (f"resize2d with method '{method}' has no ICCA implementation (offloaded: "
                f"{', '.join(_METHODS)})")
    coordinate_mode = str(attrs.coordinate_transformation_mode)
    if coordinate_mode not in COORDINATE_MODES:
        return f"resize2d with coordinate_transformation_mode '{coordinate_mode}' is unknown"
    nearest_mode = str(attrs.rounding_method)
    if method == "nearest_neighbor" and nearest_mode not in NEAREST_MODES:
        return f"resize2d with rounding_method '{nearest_mode}' (known: {', '.join(NEAREST_MODES)})"
    layout = str(attrs.layout)
    axes = _spatial_axes(layout)
    if axes is None:
        return f"resize2d with layout '{layout}' (offloaded: the plain 4-D layouts, NCHW and NHWC)"
    ty = data.ty
    if not isinstance(ty, relax.TensorType) or _static(ty.shape) is None:
        return "resize2d of a tensor with a dynamic shape"
    out_sizes = _static(size) if isinstance(size, relax.ShapeExpr) else None
    if out_sizes is None or len(out_sizes) != 2:
        return "resize2d to a dynamic output size"
    dtype = str(ty.dtype)
    if dtype not in _FLOAT_DTYPES:
        return f"resize2d of {dtype} data (the chip interpolates {', '.join(_FLOAT_DTYPES)})"
    if attrs.out_dtype is not None and str(attrs.out_dtype) not in ("", "void", dtype):
        return f"resize2d with out_dtype {attrs.out_dtype} of {dtype} data"
    in_shape = _static(ty.shape)
    roi = [float(v) for v in attrs.roi]  # (start_h, start_w, end_h, end_w)
    rois = ((roi[0], roi[2]), (roi[1], roi[3]))
    if coordinate_mode == "tf_crop_and_resize":
        for d, axis in enumerate(axes):
            coords = source_coordinates(coordinate_mode, in_shape[axis], out_sizes[d], roi=rois[d])
            if np.any((coords < 0) | (coords > in_shape[axis] - 1)):
                return (f"tf_crop_and_resize with roi {roi} samples outside the input along "
                        f"axis {axis}, where it writes extrapolation_value "
                        f"{float(attrs.extrapolation_value)}: not offloaded")
    return _Resize(data, dtype, in_shape, axes, out_sizes, _METHODS[method], coordinate_mode,
                   nearest_mode, rois, float(attrs.cubic_alpha), bool(int(attrs.cubic_exclude)))


def resize_reason(call: relax.Call) -> str | None:
    """Why the ``relax.image.resize2d`` ``call`` stays on the host, or ``None`` when
    :func:`decompose_resize` rewrites it into operators the chip runs."""
    read = _read(call)
    return read if isinstance(read, str) else None


def decompose_resize(call: relax.Call) -> relax.Expr | None:
    """The ``resize2d`` ``call`` as repeats, slices, takes and tap sums (see the module), or
    ``None`` when it stays as it is (:func:`resize_reason` says why)."""
    read = _read(call)
    if isinstance(read, str):
        return None
    shape = read.in_shape
    reads = axis_resizes([shape[a] for a in read.axes], read.out_sizes, read.axes,
                         read.method, read.coordinate_mode, read.nearest_mode, read.rois,
                         cubic_coeff_a=read.cubic_coeff_a, exclude_outside=read.exclude_outside)
    x = read.data
    slices, gathered, repeats = ordered_reads(reads)
    if slices:
        x = relax.op.strided_slice(
            x, [r.axis for r in slices], [r.start for r in slices],
            [r.start + r.factor * (r.out_size - 1) + 1 for r in slices],
            [r.factor for r in slices])
    for r in gathered:
        x = _gathered(x, r, read.dtype, len(shape))
    for r in repeats:
        x = relax.op.repeat(x, r.factor, axis=r.axis)
    return x


def _gathered(x: relax.Expr, r: AxisResize, dtype: str, ndim: int) -> relax.Expr:
    """``x`` read along ``r.axis`` through its table: one take, or a take of all taps and
    their weighted sum."""
    ids = relax.const(np.ascontiguousarray(r.ids, dtype=np.int32))
    taken = relax.op.take(x, ids, axis=r.axis)
    if r.kind == "gather":
        return taken
    # taps [.., out, T, ..]: the weights [out, T] broadcast over the dims after the axis
    weights = r.weights.astype(_numpy_dtype(dtype)).reshape(r.weights.shape + (1,) * (ndim - 1 - r.axis))
    return relax.op.sum(relax.op.multiply(taken, relax.const(weights)), axis=[r.axis + 1])


def _numpy_dtype(dtype: str) -> np.dtype:
    if dtype == "bfloat16":
        import ml_dtypes  # pylint: disable=import-outside-toplevel  (numpy has no bfloat16)

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


@tvm.transform.module_pass(opt_level=0, name="icca.DecomposeResize")
class DecomposeResize:
    """Rewrite every ``relax.image.resize2d`` that :func:`resize_reason` accepts into the
    operators of :func:`decompose_resize`. Run it before ``FuseOpsByPattern``."""

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        pattern = is_op(_OP)(wildcard(), wildcard())

        for gvar, func in rewrite_functions(mod, [(pattern, replacing_calls(decompose_resize))]).items():
            mod[gvar] = func
        return mod
