"""The inputs of an ONNX graph and the static shapes a user binds them to.

The chip runs static shapes only (a plan partitions known extents, T10 §4.2). Exporters write
symbolic dimensions by default (``torch.onnx.export`` with ``dynamic_axes``, a batch ``N``), and
TVM's importer keeps them symbolic, so every op that touches them would silently stay on the
host. :func:`tvm_icca.frontend.onnx_loader.load_onnx` and the command line's ``--shape`` both
check a user's shapes here, with the same rules and the same words:

* every bound name is a graph input (initializers are weights, not inputs);
* its rank is the input's, and its fixed dimensions are the graph's;
* every symbolic dimension left is reported with a suggested binding (1 for each symbol, the
  batch-1 inference case) rather than compiled to host-only code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:  # onnx is imported lazily: `import tvm` autoloads this package
    import onnx

__all__ = ["Dims", "format_dims", "graph_input_dtypes", "graph_inputs", "listed_inputs",
           "shape_flags", "shape_problem", "suggested_shapes", "unbound_inputs"]

#: An input's dimensions as the graph declares them: a size, a symbol, or None (unknown).
Dims = list[int | str | None]


def graph_inputs(graph: "onnx.GraphProto") -> dict[str, Dims]:
    """Input name -> declared dimensions, for the graph inputs that are not initializers."""
    initializers = {init.name for init in graph.initializer}
    inputs: dict[str, Dims] = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        dims: Dims = []
        for dim in value.type.tensor_type.shape.dim:
            kind = dim.WhichOneof("value")
            if kind == "dim_value" and dim.dim_value >= 0:  # set explicitly: 0 is an empty axis
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param if kind == "dim_param" and dim.dim_param else None)
        inputs[value.name] = dims
    return inputs


def graph_input_dtypes(graph: "onnx.GraphProto") -> dict[str, str | None]:
    """Input name -> numpy dtype name (``"float32"``), for the graph inputs that are not
    initializers; None for an input of no tensor type (a sequence, an optional)."""
    from onnx.helper import tensor_dtype_to_np_dtype  # pylint: disable=import-outside-toplevel

    initializers = {init.name for init in graph.initializer}
    dtypes: dict[str, str | None] = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        elem = value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0
        try:
            dtypes[value.name] = str(tensor_dtype_to_np_dtype(elem)) if elem else None
        except KeyError:  # an element type numpy has no name for (a string)
            dtypes[value.name] = None
    return dtypes


def format_dims(dims: Sequence[int | str | None]) -> str:
    """``[N, 16]`` (``?`` for a dimension with neither size nor name)."""
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def listed_inputs(inputs: Mapping[str, Dims]) -> str:
    """``'x' [N, 16], 'mask' [N, ?]``: inputs with their declared dimensions, for a message."""
    return ", ".join(f"'{name}' {format_dims(dims)}" for name, dims in inputs.items())


def shape_flags(shapes: Mapping[str, Sequence[int]]) -> str:
    """The command line's spelling of a binding: ``--shape x=1,16 --shape mask=1,16``."""
    return " ".join(f"--shape {name}={','.join(map(str, shape))}" for name, shape in shapes.items())


def shape_problem(inputs: Mapping[str, Dims], name: str, shape: Sequence[int]) -> str | None:
    """Why ``shape`` cannot bind input ``name`` (None: it can). The text follows the name."""
    if name not in inputs:
        return f"not an input of the model (inputs: {', '.join(inputs) or 'none'})"
    dims = inputs[name]
    if dims and len(dims) != len(shape):
        return f"{len(shape)} dimension(s), the input has {len(dims)} ({format_dims(dims)})"
    for axis, (want, given) in enumerate(zip(dims, shape)):
        if isinstance(want, int) and want != given:
            return f"dimension {axis} is fixed to {want} in the model, got {given} ({format_dims(dims)})"
    return None


def unbound_inputs(inputs: Mapping[str, Dims], shapes: Mapping[str, Sequence[int]] | None
                   ) -> dict[str, Dims]:
    """The inputs that keep a symbolic or unknown dimension once ``shapes`` are bound."""
    bound = shapes or {}
    return {name: dims for name, dims in inputs.items()
            if name not in bound and any(not isinstance(d, int) for d in dims)}


def suggested_shapes(unbound: Mapping[str, Dims]) -> dict[str, list[int]]:
    """A binding for each unbound input: its fixed dimensions, 1 for every symbol."""
    return {name: [d if isinstance(d, int) else 1 for d in dims] for name, dims in unbound.items()}
