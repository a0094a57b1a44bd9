"""ONNX ``Resize`` nodes in the form TVM's importer reads as they mean, before it runs.

TVM 0.27's importer turns a 4-D ``Resize`` into ``relax.image.resize2d`` with the output
*sizes* of the two spatial axes, which :mod:`tvm_icca.frontend.resize_rewrites` then runs on
the chip. On the way it misreads several of the node's inputs and attributes (measured on
the onnx package's node test cases of ``Resize``):

* ``axes`` (opset 18): ignored, so scales or sizes of two axes are read as those of all
  four, and the import fails;
* ``keep_aspect_ratio_policy`` (opset 18): ignored, the same failure;
* ``scales`` whose products are not whole (``4 * 0.6 = 2.4``): the importer keeps the
  output size (2) and ``resize2d`` samples at ``out / in`` (0.5), not at the node's scale
  (0.6), a different result;
* ``antialias`` (opset 18): dropped, so a downsampling is computed without its filter;
* ``half_pixel_symmetric`` (opset 19): passed on, and TVM's legalization refuses it;
* a ``roi`` that is not a constant, in a mode that never reads it: the importer switches to
  an opaque TIR resize that stays on the host;
* a resize of the batch or channel axis: dropped (only the spatial sizes are kept).

:func:`prepare_resizes` rewrites each ``Resize`` whose meaning ``resize2d`` can carry into that
form: full-rank constant ``sizes`` (the output shape the ONNX specification gives, with
``axes`` and ``keep_aspect_ratio_policy`` applied), no ``axes`` or policy, ``half_pixel``
for a ``half_pixel_symmetric`` that equals it, no unread ``roi``. Whether it can is decided
axis by axis, table by table: the input positions (and for ``linear`` their weights; for
``cubic`` the source coordinates) at the node's scale against those at ``out / in``.

A node whose tables differ is written out at the ONNX level as the same reads
:mod:`tvm_icca.frontend.resize_rewrites` gives a ``resize2d`` (its tables at the node's own
scales, :func:`~tvm_icca.frontend.resize_rewrites.axis_resizes`): a ``Slice``, a ``Gather``
of constant positions, or a ``Gather`` of all taps (two for ``linear``, four for ``cubic``), a
``Mul`` by constant weights and a ``ReduceSum`` over the taps. The importer reads those as
``strided_slice``, ``take``, ``multiply`` and ``sum``, which the chip runs (a ``repeat`` is a
``Gather`` here: ONNX has no repeat). Any other node the importer would change is refused
with :class:`ResizeRefusal`, naming the input or attribute: an ``antialias`` downsampling, a
batch or channel resize, scales or sizes that are not constants, and such a node of
non-float data or in an unknown mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

import numpy as np

from tvm_icca.frontend.onnx_prepare import inferred_types
from tvm_icca.frontend.resize_rewrites import (
    CUBIC_COEFF_A,
    axis_resizes,
    linear_taps,
    nearest_indices,
    ordered_reads,
    source_coordinates,
)

if TYPE_CHECKING:  # onnx is imported lazily: `import tvm` autoloads this package
    import onnx

__all__ = ["ResizeRefusal", "prepare_resizes"]

_DEFAULT_DOMAINS = ("", "ai.onnx")
#: The first opset whose ``Resize`` has the inputs ``X, roi, scales, sizes`` and the
#: coordinate transformation modes (opset 10's reads ``X, scales``; TVM reads only the former).
_FIRST_OPSET = 11
#: The first opset whose ``ReduceSum`` reads its axes as an input (before: an attribute).
_REDUCE_AXES_INPUT = 13
#: The ranks TVM's importer resizes (resize1d, resize2d, resize3d); the first two axes are
#: batch and channels.
_RANKS = (3, 4, 5)


@dataclass(frozen=True)
class _Read:
    """A ``Resize`` node read: its data (name, ONNX element type, shape), per axis its output
    extent and scale, per spatial axis its region of interest, and its modes."""

    x: str
    elem_type: int
    shape: tuple[int, ...]
    out: list[int]
    scales: list[float]
    rois: list[tuple[float, float]]
    mode: str
    coordinate_mode: str
    nearest_mode: str
    cubic_coeff_a: float
    exclude_outside: bool


class ResizeRefusal(Exception):
    """A ``Resize`` node TVM's importer would read with another meaning: ``node`` and
    ``reason``, a sentence that names the input or attribute."""

    def __init__(self, node: "onnx.NodeProto", reason: str) -> None:
        super().__init__(reason)
        self.node = node
        self.reason = reason


def prepare_resizes(model: "onnx.ModelProto", *, in_place: bool = False) -> "onnx.ModelProto":
    """``model`` with its ``Resize`` nodes in the form TVM's importer reads (see the module):
    ``model`` itself when nothing changes or ``in_place``, else a changed copy.

    Raises
    ------
    ResizeRefusal
        A node whose meaning the importer would change.
    """
    import onnx  # pylint: disable=import-outside-toplevel

    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), 1)
    resizes = {k: n for k, n in enumerate(graph.node)
               if n.op_type == "Resize" and n.domain in _DEFAULT_DOMAINS}
    if not resizes or opset < _FIRST_OPSET:
        return model
    constants = _constants(graph, {name for n in resizes.values() for name in n.input[1:] if name})
    types = inferred_types(model)
    replacements: dict[int, list["onnx.NodeProto"]] = {}
    for k, node in resizes.items():
        new = _prepared(node, constants, types, opset)
        if new is not None:
            replacements[k] = new
    if not replacements:
        return model
    if not in_place:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model, graph = copy, copy.graph
    nodes = [m for k, n in enumerate(graph.node) for m in replacements.get(k, [n])]
    del graph.node[:]
    graph.node.extend(nodes)
    return model


class _Constants(dict):
    """Constant tensors by name, and ``unread``: the names of ``Constant`` nodes in another
    form than ``value`` (``load_onnx``'s folding rewrites them to it; without folding they
    are left to the importer)."""

    def __init__(self) -> None:
        super().__init__()
        self.unread: set[str] = set()


def _constants(graph: "onnx.GraphProto", names: set[str]) -> _Constants:
    """The constant tensors among ``names`` (initializers that are no graph input,
    ``Constant`` nodes), by name; only those are read (not a model's weights)."""
    import onnx  # pylint: disable=import-outside-toplevel

    inputs = {i.name for i in graph.input}
    out = _Constants()
    out.update((t.name, onnx.numpy_helper.to_array(t)) for t in graph.initializer
               if t.name in names and t.name not in inputs)
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in _DEFAULT_DOMAINS and node.output[0] in names:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is None:
                out.unread.add(node.output[0])
            else:
                out[node.output[0]] = onnx.numpy_helper.to_array(value)
    return out


def _attrs(node: "onnx.NodeProto") -> dict:
    import onnx  # pylint: disable=import-outside-toplevel

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _text(value: object, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def _prepared(node: "onnx.NodeProto", constants: _Constants, types: Mapping,
              opset: int) -> list["onnx.NodeProto"] | None:
    """The nodes that replace ``node`` (a constant ``sizes``, then the node rewritten), or
    None when it stays as it is; raises :class:`ResizeRefusal`."""
    inputs = list(node.input) + [""] * (4 - len(node.input))
    x, roi_name, scales_name, sizes_name = inputs[:4]
    _, shape = types.get(x, (0, None))
    if shape is None or None in shape or len(shape) not in _RANKS:
        return None  # no static shape to resize: the importer decides
    for what, name in (("scales", scales_name), ("sizes", sizes_name)):
        if name and name not in constants:
            if name in constants.unread:
                return None  # a Constant in a form not read here: the importer decides
            raise ResizeRefusal(node, (
                f"reads its {what} from '{name}', which is not a constant: TVM's importer needs "
                "the output size of a resize when it imports (make it an initializer, or bind "
                "the inputs it is computed from with shape_dict so that it folds)"))
    attrs = _attrs(node)
    mode = _text(attrs.get("mode"), "nearest")
    coordinate_mode = _text(attrs.get("coordinate_transformation_mode"), "half_pixel")
    nearest_mode = _text(attrs.get("nearest_mode"), "round_prefer_floor")
    policy = _text(attrs.get("keep_aspect_ratio_policy"), "stretch")
    rank = len(shape)
    axes = [int(a) % rank for a in attrs.get("axes", range(rank))]
    roi = constants.get(roi_name) if roi_name else None
    reads_roi = coordinate_mode == "tf_crop_and_resize"
    if reads_roi and roi is None:
        return None  # a dynamic region of interest: the importer's TIR resize on the host
    scales, out = _output_shape(node, shape, axes, policy,
                                constants.get(scales_name) if scales_name else None,
                                constants.get(sizes_name) if sizes_name else None)
    full_roi = _full_roi(roi, axes, rank) if reads_roi else None
    for axis in range(rank):
        if axis < 2 and (out[axis] != shape[axis] or scales[axis] != 1):
            raise ResizeRefusal(node, (
                f"resizes axis {axis} ({'batch' if axis == 0 else 'channels'}) from "
                f"{shape[axis]} to {out[axis]}: TVM's importer resizes the spatial axes only"))
    spatial = range(2, rank)
    if int(attrs.get("antialias", 0)) and mode != "nearest" and any(scales[a] < 1 for a in spatial):
        raise ResizeRefusal(node, (
            f"downsamples with antialias=1 (scales {_listed(scales)}): TVM's importer drops "
            "antialias and would resize without its filter; not imported"))
    rois = [(0.0, 1.0) if full_roi is None else (full_roi[a], full_roi[rank + a]) for a in spatial]
    lossy = [a for a, roi in zip(spatial, rois) if not _same_sampling(
        mode, coordinate_mode, nearest_mode, shape[a], out[a], scales[a], roi)]
    if lossy:
        read = _Read(x, types.get(x, (0, None))[0], tuple(shape), out, scales, rois, mode,
                     coordinate_mode, nearest_mode,
                     float(attrs.get("cubic_coeff_a", CUBIC_COEFF_A)),
                     bool(int(attrs.get("exclude_outside", 0))))
        return _written_out(node, read, lossy[0], opset)
    return _rewritten(node, attrs, out, roi_name if reads_roi else "",
                      full_roi if (reads_roi and len(roi) != 2 * rank) else None,
                      "half_pixel" if coordinate_mode == "half_pixel_symmetric" else coordinate_mode)


def _output_shape(node: "onnx.NodeProto", shape: tuple[int, ...], axes: list[int], policy: str,
                  scales: np.ndarray | None, sizes: np.ndarray | None
                  ) -> tuple[list[float], list[int]]:
    """Per axis, the scale and the output extent of the ONNX specification (``Resize``:
    scales give ``floor(in * scale)``; sizes give ``scale = out / in``, except under a
    ``keep_aspect_ratio_policy``, whose one scale is the smallest or largest ratio over the
    given axes and whose extents are ``in * scale`` rounded half up)."""
    rank = len(shape)
    scale = [1.0] * rank
    out = list(shape)
    if sizes is not None and sizes.size:
        given = [int(v) for v in sizes.reshape(-1)]
        if len(given) != len(axes):
            raise ResizeRefusal(node, f"has {len(given)} sizes for {len(axes)} axes")
        ratios = {a: g / shape[a] for a, g in zip(axes, given)}
        if policy == "stretch":
            for a, g in zip(axes, given):
                scale[a], out[a] = ratios[a], g
        else:
            if policy not in ("not_larger", "not_smaller"):
                raise ResizeRefusal(node, f"has keep_aspect_ratio_policy '{policy}' (known: "
                                    "stretch, not_larger, not_smaller)")
            one = (min if policy == "not_larger" else max)(ratios.values())
            for a in axes:
                scale[a], out[a] = one, int(one * shape[a] + 0.5)
    elif scales is not None and scales.size:
        given = [float(v) for v in scales.reshape(-1)]
        if len(given) != len(axes):
            raise ResizeRefusal(node, f"has {len(given)} scales for {len(axes)} axes")
        for a, s in zip(axes, given):
            scale[a], out[a] = s, int(np.floor(np.float64(s) * shape[a]))
    else:
        raise ResizeRefusal(node, "has neither scales nor sizes")
    return scale, out


def _full_roi(roi: np.ndarray, axes: list[int], rank: int) -> list[float]:
    """The region of interest over all axes, ``[starts..., ends...]`` (the axes not given
    span their whole extent)."""
    values = [float(v) for v in roi.reshape(-1)]
    if len(values) == 2 * rank and len(axes) == rank:
        return values
    full = [0.0] * rank + [1.0] * rank
    for k, a in enumerate(axes):
        full[a], full[rank + a] = values[k], values[len(axes) + k]
    return full


def _same_sampling(mode: str, coordinate_mode: str, nearest_mode: str, in_size: int,
                   out_size: int, scale: float, roi: tuple[float, float]) -> bool:
    """Whether ``resize2d`` (which samples at ``out / in``) reads what the node's scale reads
    along one axis: the same input positions and, for ``linear``, weights; the same source
    coordinates for ``cubic``."""
    node = source_coordinates(coordinate_mode, in_size, out_size, scale=scale, roi=roi)
    sizes = source_coordinates(coordinate_mode, in_size, out_size, roi=roi)
    if mode == "nearest":
        try:
            return np.array_equal(nearest_indices(node, nearest_mode, in_size),
                                  nearest_indices(sizes, nearest_mode, in_size))
        except ValueError:
            return True  # an unknown nearest_mode: the importer and its refusal decide
    if mode == "linear":
        (ids_a, w_a), (ids_b, w_b) = linear_taps(node, in_size), linear_taps(sizes, in_size)
        return np.array_equal(ids_a, ids_b) and np.array_equal(w_a, w_b)
    return np.array_equal(node, sizes)


def _written_out(node: "onnx.NodeProto", read: _Read, lossy: int, opset: int
                 ) -> list["onnx.NodeProto"]:
    """The reads of :func:`tvm_icca.frontend.resize_rewrites.axis_resizes` at the node's own
    scales, as ONNX nodes the importer reads as they mean (see the module), or
    :class:`ResizeRefusal` when the resize is none of these (an unknown mode, non-float
    data, a ``tf_crop_and_resize`` that extrapolates). ``lossy``: an axis whose tables
    differ."""
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import helper, numpy_helper  # pylint: disable=import-outside-toplevel

    shape, out, scale = read.shape, read.out, read.scales
    problem = (f"resizes axis {lossy} from {shape[lossy]} to {out[lossy]} by scale "
               f"{scale[lossy]:.9g}, whose {read.coordinate_mode} sampling differs from the "
               f"ratio {out[lossy]}/{shape[lossy]} of the sizes TVM's importer keeps")
    dtype = onnx.helper.tensor_dtype_to_np_dtype(read.elem_type) if read.elem_type else None
    floating = dtype is not None and (dtype.kind == "f" or dtype.name == "bfloat16")
    if read.mode not in ("nearest", "linear", "cubic") or not floating:
        raise ResizeRefusal(node, (
            f"{problem}, so it would compute another result, and a {read.mode} resize of "
            f"{dtype or 'untyped'} data is not written out for it (give the node sizes, or "
            "scales whose products with the input shape are whole)"))
    spatial = list(range(2, len(shape)))
    coords = [source_coordinates(read.coordinate_mode, shape[a], out[a], scale[a], roi)
              for a, roi in zip(spatial, read.rois)]
    if read.coordinate_mode == "tf_crop_and_resize" and any(
            np.any((c < 0) | (c > shape[a] - 1)) for a, c in zip(spatial, coords)):
        raise ResizeRefusal(node, (
            f"{problem}, and samples outside its input, where it writes extrapolation_value: "
            "not imported"))
    reads = axis_resizes([shape[a] for a in spatial], [out[a] for a in spatial], spatial,
                         read.mode, read.coordinate_mode, read.nearest_mode, read.rois,
                         [scale[a] for a in spatial], cubic_coeff_a=read.cubic_coeff_a,
                         exclude_outside=read.exclude_outside)
    stem, made = node.output[0], []

    def constant(value: np.ndarray) -> str:
        name = f"{stem}__icca_c{len(made)}"
        made.append(helper.make_node("Constant", [], [name], name=name,
                                     value=numpy_helper.from_array(value, name)))
        return name

    def emit(op_type: str, inputs: list[str], **attrs: object) -> str:
        name = f"{stem}__icca_{len(made)}"
        made.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def ints(values: list[int]) -> str:
        return constant(np.asarray(values, np.int64))

    current = read.x
    slices, gathered, repeats = ordered_reads(reads)
    if slices:
        current = emit("Slice", [current, ints([r.start for r in slices]),
                                 ints([r.start + r.factor * (r.out_size - 1) + 1 for r in slices]),
                                 ints([r.axis for r in slices]), ints([r.factor for r in slices])])
    for r in gathered + repeats:  # a repeat is a gather too here (ONNX has no repeat)
        current = emit("Gather", [current, constant(r.ids.astype(np.int64))], axis=r.axis)
        if r.kind == "taps":
            weights = r.weights.astype(dtype).reshape(r.weights.shape + (1,) * (len(shape) - 1 - r.axis))
            current = emit("Mul", [current, constant(weights)])
            if opset >= _REDUCE_AXES_INPUT:
                current = emit("ReduceSum", [current, ints([r.axis + 1])], keepdims=0)
            else:
                current = emit("ReduceSum", [current], axes=[r.axis + 1], keepdims=0)
    if current == read.x:
        emit("Identity", [read.x])
    last = made[-1]  # computes the node's output, under its name
    last.output[0] = stem
    last.name = node.name
    return made


def _listed(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.9g}" for v in values) + "]"


def _rewritten(node: "onnx.NodeProto", attrs: dict, out: list[int], roi_name: str,
               full_roi: list[float] | None, coordinate_mode: str) -> list["onnx.NodeProto"]:
    """A constant of the output shape and ``node`` reading it as its ``sizes`` (and the full
    region of interest when the node gave it for some axes only), without ``axes`` and
    ``keep_aspect_ratio_policy``."""
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import helper, numpy_helper  # pylint: disable=import-outside-toplevel

    stem = node.output[0]
    made = []
    sizes_name = f"{stem}__icca_sizes"
    made.append(helper.make_node("Constant", [], [sizes_name], name=sizes_name,
                                 value=numpy_helper.from_array(np.asarray(out, np.int64), sizes_name)))
    if full_roi is not None:
        roi_name = f"{stem}__icca_roi"
        made.append(helper.make_node("Constant", [], [roi_name], name=roi_name,
                                     value=numpy_helper.from_array(np.asarray(full_roi, np.float32),
                                                                   roi_name)))
    kept = {k: v for k, v in attrs.items() if k not in ("axes", "keep_aspect_ratio_policy")}
    kept["coordinate_transformation_mode"] = coordinate_mode
    new = onnx.NodeProto()
    new.CopyFrom(node)
    del new.input[:]
    new.input.extend([node.input[0], roi_name, "", sizes_name])
    del new.attribute[:]
    new.attribute.extend(helper.make_attribute(k, v) for k, v in sorted(kept.items()))
    return [*made, new]
