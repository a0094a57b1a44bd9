"""ONNX graph preparation before TVM's importer: static input shapes, shape inference and
folding of constant subgraphs, with the onnx package's own tools.

Real exporters emit graph pieces TVM's importer converts poorly or not at all when they are
left symbolic: PyTorch writes the head split of attention as ``Shape -> Gather -> Unsqueeze
-> Concat -> Reshape`` even when every shape is static, and GPT-2's export has a
``ConstantOfShape`` of an empty shape (a scalar), which the importer turns into an invalid
``broadcast_to`` to rank 0. Evaluating such subgraphs on the ONNX graph, where their meaning
is the ONNX specification's, leaves the importer constants (and Reshape a constant shape):

* ``onnx.shape_inference.infer_shapes`` (with data propagation) gives every tensor's static
  shape, so ``Shape`` and ``Size`` of a statically shaped tensor become constants;
* a node whose inputs are all constants is run by ``onnx.reference.ReferenceEvaluator`` (the
  onnx package's reference implementation of every operator) and replaced by a ``Constant``
  node with the same output name and the node's name, so graph outputs and the names in
  import errors stay those of the model.

Constants are emitted as ``Constant`` nodes rather than initializers: TVM's importer turns
initializers into function parameters under ``keep_params_in_input``, and a Reshape needs its
shape as a constant. Random operators, operators with subgraphs or of other domains, and
results that would grow the model (see :func:`prepare_onnx`) are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:  # onnx is imported lazily: `import tvm` autoloads this package
    import onnx

__all__ = ["FoldStats", "prepare_onnx", "DEFAULT_MAX_FOLDED_BYTES", "inferred_types"]

#: Results up to this size are folded whatever their inputs: the shape, index, position and
#: scalar tensors that folding is for are far smaller. Larger results are folded only when no
#: larger than the constants they replace, so folding never stores a broadcast (an ``Expand``
#: of a bias to the batch) in place of its small operands.
DEFAULT_MAX_FOLDED_BYTES = 64 * 1024

#: Operators whose result is not a function of their inputs (ONNX operator specification;
#: Dropout is random in training mode).
_NONDETERMINISTIC = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform",
                               "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"})
_DEFAULT_DOMAINS = ("", "ai.onnx")
#: Per tensor name: ONNX element type and shape (None: rank unknown; a None extent: symbolic).
_Types = dict[str, tuple[int, "tuple[int | None, ...] | None"]]


@dataclass
class FoldStats:
    """What :func:`prepare_onnx` changed: nodes replaced by constants (``Shape``/``Size`` of
    static tensors included), ``Constant`` nodes rewritten to the ``value`` form TVM reads,
    and nodes and initializers removed because nothing reads them any more."""

    folded: int = 0
    normalized_constants: int = 0
    removed_nodes: int = 0
    removed_initializers: int = 0
    rounds: int = 0


def prepare_onnx(
    model: "onnx.ModelProto",
    shape_dict: Mapping[str, Sequence[int]] | None = None,
    *,
    fold_initializers: bool = True,
    max_folded_bytes: int = DEFAULT_MAX_FOLDED_BYTES,
    stats: FoldStats | None = None,
    in_place: bool = False,
) -> "onnx.ModelProto":
    """``model`` with static input shapes, inferred shapes and constant subgraphs folded: a
    copy, or ``model`` itself changed when ``in_place`` (no second copy of the weights).

    Parameters
    ----------
    model : onnx.ModelProto
        A model ``onnx.checker`` accepts (nodes in topological order).
    shape_dict : dict, optional
        Input name -> static shape, written into the graph inputs first, so that shape
        computations on inputs with symbolic dimensions (a dynamic batch) fold too.
    fold_initializers : bool
        Treat initializers as constants. Off when the importer keeps weights as function
        parameters (``keep_params_in_input``): they are then inputs, not values.
    max_folded_bytes : int
        Results up to this size are always folded; larger ones only when they are no larger
        than the constant inputs they replace.
    stats : FoldStats, optional
        Filled with what changed.
    """
    import onnx  # pylint: disable=import-outside-toplevel

    stats = stats if stats is not None else FoldStats()
    out = model
    if not in_place:
        out = onnx.ModelProto()
        out.CopyFrom(model)
    graph = out.graph
    if shape_dict:
        _set_input_shapes(graph, shape_dict)
    opset = next((o.version for o in out.opset_import if o.domain in _DEFAULT_DOMAINS), 1)
    graph_inputs = {i.name for i in graph.input}
    constants: dict[str, np.ndarray] = {}
    if fold_initializers:
        constants.update((t.name, onnx.numpy_helper.to_array(t))
                         for t in graph.initializer if t.name not in graph_inputs)
    while True:
        stats.rounds += 1
        types = inferred_types(out)
        if not _fold_round(graph, constants, types, opset, max_folded_bytes, stats):
            break
    _remove_unread(graph, graph_inputs if fold_initializers else None, stats)
    return out


# -- shapes -----------------------------------------------------------------------------------
def _set_input_shapes(graph: "onnx.GraphProto", shape_dict: Mapping[str, Sequence[int]]) -> None:
    for value in graph.input:
        if value.name not in shape_dict or not value.type.HasField("tensor_type"):
            continue
        shape = value.type.tensor_type.shape
        shape.Clear()
        for extent in shape_dict[value.name]:
            shape.dim.add().dim_value = int(extent)


def inferred_types(model: "onnx.ModelProto") -> _Types:
    """Element type and shape (None when the rank is unknown, a None extent when symbolic) of
    every tensor
    ``onnx.shape_inference`` can type. It runs on the graph without its float initializers
    (they become typed inputs): their values never decide a shape, and a model over 2 GB
    could not be serialized for the inference otherwise."""
    import onnx  # pylint: disable=import-outside-toplevel

    skeleton = onnx.ModelProto()
    skeleton.ir_version = model.ir_version
    skeleton.opset_import.extend(model.opset_import)
    skeleton.functions.extend(model.functions)
    graph = skeleton.graph
    source = model.graph
    graph.name = source.name
    graph.node.extend(source.node)
    graph.input.extend(source.input)
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    declared = {i.name for i in source.input}
    for tensor in source.initializer:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type) if tensor.data_type else None
        if dtype is not None and np.issubdtype(dtype, np.integer):
            graph.initializer.append(tensor)
        elif tensor.name not in declared:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type,
                                                                  list(tensor.dims)))
    try:
        inferred = onnx.shape_inference.infer_shapes(skeleton, data_prop=True)
    except Exception:  # pylint: disable=broad-except
        # An inference failure only means fewer Shape nodes fold; the importer still decides.
        inferred = skeleton
    types: _Types = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        if not value.type.HasField("tensor_type"):
            continue
        tensor_type = value.type.tensor_type
        shape = None
        if tensor_type.HasField("shape"):
            shape = tuple(int(d.dim_value) if d.HasField("dim_value") else None
                          for d in tensor_type.shape.dim)
        types[value.name] = (int(tensor_type.elem_type), shape)
    return types


# -- folding ----------------------------------------------------------------------------------
def _fold_round(graph: "onnx.GraphProto", constants: dict[str, np.ndarray], types: _Types, opset: int,
                max_folded_bytes: int, stats: FoldStats) -> bool:
    """One pass in topological order; returns whether a node was replaced."""
    changed = False
    nodes = []
    shapes: dict[str, tuple[int | None, ...]] = {}  # outputs of Shape nodes that stay
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in _DEFAULT_DOMAINS:
            value = _constant_value(node, opset)
            if value is not None:
                constants[node.output[0]] = value
                if not any(a.name == "value" for a in node.attribute):
                    node = _constant_node(node.name, node.output[0], value)
                    stats.normalized_constants += 1
                    changed = True
            nodes.append(node)
            continue
        values = _folded_values(node, constants, types, shapes, opset, max_folded_bytes)
        if values is None:
            if node.op_type == "Shape" and node.domain in _DEFAULT_DOMAINS:
                extents = _shape_extents(node, types)
                if extents is not None:
                    shapes[node.output[0]] = extents
            nodes.append(node)
            continue
        for k, (name, value) in enumerate(values.items()):
            constants[name] = value
            label = node.name if k == 0 or not node.name else f"{node.name}_{k}"
            nodes.append(_constant_node(label, name, value))
        stats.folded += 1
        changed = True
    if changed:
        del graph.node[:]
        graph.node.extend(nodes)
    return changed


def _folded_values(node: "onnx.NodeProto", constants: Mapping[str, np.ndarray], types: _Types,
                   shapes: Mapping[str, tuple[int | None, ...]], opset: int,
                   max_folded_bytes: int) -> dict[str, np.ndarray] | None:
    """The node's outputs by name when it can be replaced by constants, else None.
    ``shapes``: the extents the ``Shape`` nodes that stay read (some symbolic)."""
    if (node.domain not in _DEFAULT_DOMAINS or node.op_type in _NONDETERMINISTIC
            or any(a.HasField("g") or a.graphs for a in node.attribute)):
        return None
    outputs = [o for o in node.output if o]
    if not outputs:
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] not in constants:
        value = _shape_value(node, types)
        return None if value is None else {outputs[0]: value}
    if node.op_type == "Gather" and node.input[0] in shapes:
        value = _gathered_extents(node, constants, shapes)
        return None if value is None else {outputs[0]: value}
    inputs = [i for i in node.input if i]
    if any(i not in constants for i in inputs):
        return None
    try:
        import onnx.reference  # pylint: disable=import-outside-toplevel

        results = onnx.reference.ReferenceEvaluator(node, opsets={"": opset}).run(
            None, {i: constants[i] for i in inputs})
    except Exception:  # pylint: disable=broad-except
        return None  # not evaluable here (an op the reference lacks): the importer decides
    named = dict(zip(node.output, results))
    values = {}
    limit = max(max_folded_bytes, sum(constants[i].nbytes for i in inputs))
    for name in outputs:
        value = named.get(name)
        if not isinstance(value, np.ndarray) and not np.isscalar(value):
            return None  # a sequence, map or optional: not a tensor constant
        value = np.asarray(value)
        if value.dtype.kind in "OSU" or value.nbytes > limit or not _matches(value, types.get(name)):
            return None
        values[name] = value
    return values


def _shape_value(node: "onnx.NodeProto", types: _Types) -> np.ndarray | None:
    """``Shape`` or ``Size`` of a tensor whose asked-for extents are static."""
    extents = _shape_extents(node, types)
    if extents is None or None in extents:
        return None
    if node.op_type == "Size":
        return np.asarray(int(np.prod(extents, dtype=np.int64)), np.int64)
    return np.asarray(extents, dtype=np.int64)


def _shape_extents(node: "onnx.NodeProto", types: _Types) -> tuple[int | None, ...] | None:
    """What ``Shape`` (with its ``start``/``end``, opset 15) or ``Size`` reads of its input's
    shape, as the ONNX specification defines them; None extents are symbolic."""
    _, shape = types.get(node.input[0], (0, None))
    if shape is None or node.op_type == "Size":
        return shape
    attrs = {a.name: a.i for a in node.attribute}
    # Python slicing clamps and wraps negative bounds exactly as the specification says.
    return shape[attrs.get("start", 0):attrs.get("end", len(shape))]


def _gathered_extents(node: "onnx.NodeProto", constants: Mapping[str, np.ndarray],
                      shapes: Mapping[str, tuple[int | None, ...]]) -> np.ndarray | None:
    """``Gather`` of static extents from a shape with symbolic ones (``Shape(x)[1]`` of a
    tensor with a dynamic batch: how PyTorch exports read a sequence length)."""
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if len(node.input) != 2 or node.input[1] not in constants or axis not in (0, -1):
        return None
    extents = shapes[node.input[0]]
    indices = constants[node.input[1]]
    if not np.issubdtype(indices.dtype, np.integer) or not np.all(
            (-len(extents) <= indices) & (indices < len(extents))):
        return None
    picked = [extents[int(i)] for i in indices.reshape(-1)]
    return None if None in picked else np.asarray(picked, np.int64).reshape(indices.shape)


def _matches(value: np.ndarray, inferred: tuple[int, "tuple[int | None, ...] | None"] | None) -> bool:
    """Whether the evaluated value agrees with shape inference (where it typed the tensor):
    a disagreement means one of the two is wrong, and then the importer decides."""
    import onnx  # pylint: disable=import-outside-toplevel

    if inferred is None:
        return True
    elem_type, shape = inferred
    if elem_type:
        try:
            if onnx.helper.np_dtype_to_tensor_dtype(value.dtype) != elem_type:
                return False
        except (KeyError, TypeError, ValueError):
            return False
    return shape is None or (len(shape) == value.ndim and all(
        s is None or s == v for s, v in zip(shape, value.shape)))


def _constant_value(node: "onnx.NodeProto", opset: int) -> np.ndarray | None:
    import onnx  # pylint: disable=import-outside-toplevel

    for attr in node.attribute:
        if attr.name == "value":
            return onnx.numpy_helper.to_array(attr.t)
    if any(a.name == "sparse_value" for a in node.attribute):
        return None
    try:
        import onnx.reference  # pylint: disable=import-outside-toplevel

        (value,) = onnx.reference.ReferenceEvaluator(node, opsets={"": opset}).run(None, {})
    except Exception:  # pylint: disable=broad-except
        return None
    return np.asarray(value) if isinstance(value, np.ndarray) or np.isscalar(value) else None


def _constant_node(name: str, output: str, value: np.ndarray) -> "onnx.NodeProto":
    import onnx  # pylint: disable=import-outside-toplevel

    return onnx.helper.make_node("Constant", [], [output], name=name,
                                 value=onnx.numpy_helper.from_array(value, output))


# -- dead constants ---------------------------------------------------------------------------
def _read_names(nodes: Iterable["onnx.NodeProto"]) -> set[str]:
    """Every tensor name the nodes read, inside their subgraphs too (which may read names of
    the enclosing graph)."""
    names: set[str] = set()
    for node in nodes:
        names.update(node.input)
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                names |= _read_names(sub.node)
                names.update(o.name for o in sub.output)
    return names


def _remove_unread(graph: "onnx.GraphProto", graph_inputs: set[str] | None,
                   stats: FoldStats) -> None:
    """Drop the constants nothing reads any more (after folding, the inputs of folded nodes),
    and the initializers too unless ``graph_inputs`` is None (initializers are then function
    parameters, which must stay)."""
    read = _read_names(graph.node) | {o.name for o in graph.output}
    keep = [n for n in graph.node
            if not (n.op_type == "Constant" and n.domain in _DEFAULT_DOMAINS and n.output[0] not in read)]
    if len(keep) != len(graph.node):
        stats.removed_nodes += len(graph.node) - len(keep)
        del graph.node[:]
        graph.node.extend(keep)
    if graph_inputs is None:
        return
    kept = [t for t in graph.initializer if t.name in read or t.name in graph_inputs]
    if len(kept) != len(graph.initializer):
        stats.removed_initializers += len(graph.initializer) - len(kept)
        del graph.initializer[:]
        graph.initializer.extend(kept)
