"""ONNX ``ConvTranspose``'s ``output_shape`` and ``auto_pad`` written as explicit pads, before
TVM's importer reads them.

The ONNX operator specification (ConvTranspose) derives the pads from the output shape:
``total = stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1 - output_shape``
per spatial axis, ``output_shape`` being the attribute or, for ``auto_pad`` ``SAME_UPPER`` /
``SAME_LOWER`` without it, ``in * stride``; ``SAME_UPPER`` puts ``total // 2`` at the
start and the rest at the end, any other ``auto_pad`` the rest at the start and
``total // 2`` at the end (floor division, as ``onnx.reference``'s ConvTranspose, whose
results the ONNX node test cases hold). TVM 0.27's importer ignores ``output_shape``
(``test_convtranspose_output_shape`` comes out 9 x 7 instead of 10 x 8) and clamps a negative
``SAME_*`` total at 0 (a smaller output than ``in * stride``): both silently wrong.

:func:`explicit_conv_transpose_pads` writes the specification's pads into every such node
(``pads``, dropping ``output_shape`` and ``auto_pad``). A negative total asks for a larger
output than the kernel covers: a negative end pad is the same as that many more rows of
``output_padding`` (both extend the output at its end, neither moves the rest), which TVM
takes while it stays below the stride; what TVM cannot express (a negative start pad, an
``output_padding`` of a stride or more, an ``output_shape`` of an input whose shape is not
known) is refused with a :class:`~runtime_sim.contract.errors.ModelImportError` naming the
node and the attribute, rather than imported wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from runtime_sim.contract.errors import ModelImportError

if TYPE_CHECKING:  # onnx is imported lazily: `import tvm` autoloads this package
    import onnx

__all__ = ["explicit_conv_transpose_pads", "spec_pads"]


def spec_pads(in_size: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int], output_padding: Sequence[int],
              output_shape: Sequence[int], same_upper: bool) -> list[int]:
    """The pads ``[begins..., ends...]`` the ONNX specification gives a ConvTranspose whose
    output must have ``output_shape`` (module docstring); negative where the output is
    larger than the kernel covers."""
    begins, ends = [], []
    for i, k, s, d, op, out in zip(in_size, kernel, strides, dilations, output_padding, output_shape):
        total = s * (i - 1) + op + (k - 1) * d + 1 - out
        half = total // 2
        begins.append(half if same_upper else total - half)
        ends.append(total - half if same_upper else half)
    return begins + ends


def explicit_conv_transpose_pads(model: "onnx.ModelProto",
                                 shapes: Mapping[str, Sequence[int]] | None = None,
                                 *, in_place: bool = False, label: str = "the model") -> "onnx.ModelProto":
    """``model`` with the ``output_shape`` and ``SAME_*`` ``auto_pad`` of its ConvTranspose
    nodes written as explicit ``pads`` (and ``output_padding``), as the module docstring says.

    Parameters
    ----------
    model : onnx.ModelProto
        The model; returned unchanged (the same object) when no node needs it.
    shapes : dict, optional
        Static shapes of graph inputs that the model leaves symbolic.
    in_place : bool
        Change ``model`` itself rather than a copy.
    label : str
        How errors name the model.

    Raises
    ------
    ModelImportError
        A node whose pads TVM's ConvTranspose cannot express (see the module docstring).
    """
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import helper  # pylint: disable=import-outside-toplevel

    def wanted(node: "onnx.NodeProto") -> bool:
        if node.op_type != "ConvTranspose" or node.domain not in ("", "ai.onnx"):
            return False
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return "output_shape" in attrs or _auto_pad(attrs) in ("SAME_UPPER", "SAME_LOWER")

    if not any(wanted(node) for node in model.graph.node):
        return model
    if not in_place:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    known = _known_shapes(model, shapes or {})
    for node in model.graph.node:
        if wanted(node):
            _rewrite(node, known, label)
    return model


def _auto_pad(attrs: Mapping) -> str:
    value = attrs.get("auto_pad", "NOTSET")
    return value.decode() if isinstance(value, bytes) else str(value)


def _known_shapes(model: "onnx.ModelProto", shapes: Mapping[str, Sequence[int]]
                  ) -> dict[str, list[int | None]]:
    """Every tensor's shape that shape inference knows (None for a symbolic extent)."""
    import onnx  # pylint: disable=import-outside-toplevel

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # pylint: disable=broad-except  (then only what the graph declares)
        inferred = model
    graph = inferred.graph
    known: dict[str, list[int | None]] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        tensor = info.type.tensor_type
        if info.type.HasField("tensor_type") and tensor.HasField("shape"):
            known[info.name] = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    for init in graph.initializer:
        known[init.name] = list(init.dims)
    known.update({name: [int(d) for d in dims] for name, dims in shapes.items()})
    return known


def _describe(node: "onnx.NodeProto") -> str:
    return f"ConvTranspose node '{node.name}'" if node.name else \
        f"the ConvTranspose node computing '{node.output[0]}'"


def _rewrite(node: "onnx.NodeProto", known: Mapping[str, list[int | None]], label: str) -> None:
    from onnx import helper  # pylint: disable=import-outside-toplevel

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    where = f"cannot import {label}: {_describe(node)}"
    auto_pad = _auto_pad(attrs)
    data = known.get(node.input[0])
    weight = known.get(node.input[1])
    kernel = list(attrs.get("kernel_shape", weight[2:] if weight is not None else []))
    spatial = len(kernel)
    if not kernel or any(k is None for k in kernel):
        raise ModelImportError(f"{where}: its kernel shape is not known, so the pads its "
                               f"{'output_shape' if 'output_shape' in attrs else 'auto_pad'} asks for "
                               "cannot be computed")
    strides = list(attrs.get("strides", [1] * spatial))
    dilations = list(attrs.get("dilations", [1] * spatial))
    output_padding = list(attrs.get("output_padding", [0] * spatial))
    in_size = data[2:] if data is not None and len(data) == spatial + 2 else [None] * spatial
    if "output_shape" in attrs:
        what = f"output_shape {list(attrs['output_shape'])}"
        output_shape = list(attrs["output_shape"])
        if len(output_shape) != spatial:
            raise ModelImportError(f"{where}: its {what} has {len(output_shape)} extents for "
                                   f"{spatial} spatial axes (the spec: without batch and channels)")
        if any(i is None for i in in_size):
            raise ModelImportError(f"{where}: its {what} needs the input's spatial shape, which is not "
                                   "known (bind it with shape_dict)")
    else:
        what = f"auto_pad {auto_pad}"
        # output_shape = in * stride: the input size cancels out of the total padding
        in_size = [1] * spatial
        output_shape = list(strides)
    pads = spec_pads(in_size, kernel, strides, dilations, output_padding, output_shape,
                     auto_pad == "SAME_UPPER")
    begins, ends = pads[:spatial], pads[spatial:]
    if any(b < 0 for b in begins):
        raise ModelImportError(f"{where}: its {what} asks for the pads {pads} (ONNX ConvTranspose), a "
                               "negative one at the start, which TVM's ConvTranspose cannot express")
    output_padding = [op + max(0, -e) for op, e in zip(output_padding, ends)]
    if any(op >= s for op, s in zip(output_padding, strides)):
        raise ModelImportError(f"{where}: its {what} asks for the pads {pads} (ONNX ConvTranspose); the "
                               f"output_padding {output_padding} that extends the output that far is not "
                               f"below the strides {strides}, which TVM's ConvTranspose requires")
    ends = [max(0, e) for e in ends]
    kept = [a for a in node.attribute if a.name not in ("pads", "auto_pad", "output_shape", "output_padding")]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.extend([helper.make_attribute("pads", begins + ends),
                           helper.make_attribute("output_padding", output_padding)])
