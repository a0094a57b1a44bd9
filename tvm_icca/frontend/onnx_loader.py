"""Model import (ONNX through TVM's own importer) and one-call compilation.

Every import failure -- missing or unreadable file, bytes that are not an ONNX protobuf, a model
``onnx.checker`` rejects, an op TVM's importer does not know -- is raised as one
:class:`~runtime_sim.contract.errors.ModelImportError` with a one-paragraph message, without the TVM
traceback behind it.
"""

from __future__ import annotations

import contextlib
import io
import numbers
import os
import warnings
from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union

import tvm
from tvm.ir import IRModule

from runtime_sim.contract.errors import ModelImportError
from tvm_icca.frontend.onnx_inputs import (
    Dims,
    graph_inputs,
    listed_inputs,
    shape_flags,
    shape_problem,
    suggested_shapes,
    unbound_inputs,
)
from tvm_icca.frontend.onnx_conv_transpose import explicit_conv_transpose_pads
from tvm_icca.frontend.onnx_prepare import describe_node, prepare_onnx
from tvm_icca.frontend.onnx_resize import ResizeRefusal, prepare_resizes
from tvm_icca.frontend.recurrent import has_recurrent, unroll_recurrent

#: Module attribute :func:`load_onnx` stamps: the model's ONNX op types, with which the
#: partition report names a host op as the model does (``Einsum``, not ``relax.call_tir``).
ONNX_OPS_ATTR = "icca.onnx_op_types"

if TYPE_CHECKING:  # onnx is imported lazily: `import tvm` autoloads this package
    import onnx

__all__ = ["ModelSource", "load_onnx"]

#: What :func:`load_onnx` accepts: a file path, the serialized model, or a ModelProto.
ModelSource = Union[str, "os.PathLike[str]", bytes, "onnx.ModelProto"]


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _external_tensors(model: "onnx.ModelProto") -> list:
    """Tensors of ``model`` whose data lives in external files (every model over 2 GB)."""
    from onnx import external_data_helper  # pylint: disable=import-outside-toplevel

    return [t for t in external_data_helper._get_all_tensors(model)  # pylint: disable=protected-access
            if external_data_helper.uses_external_data(t)]


def _read_external_model(path: str, label: str) -> "onnx.ModelProto":
    """Load a model file whose tensors are stored as external data, resolving the data files
    relative to the model's folder (never the working directory), and check it by path (the
    only way ``onnx.checker`` accepts models over 2 GB)."""
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import external_data_helper  # pylint: disable=import-outside-toplevel

    base = os.path.dirname(os.path.abspath(path))
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as err:  # pylint: disable=broad-except
        raise ModelImportError(
            f"cannot import {label}: not a valid ONNX protobuf ({_first_line(err)})"
        ) from None
    for tensor in _external_tensors(model):
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if not location or not os.path.isfile(os.path.join(base, location)):
            raise ModelImportError(
                f"cannot import {label}: tensor '{tensor.name}' is stored as external data in "
                f"'{location}', which is not a file next to the model (looked in {base})"
            )
    try:
        onnx.checker.check_model(os.path.abspath(path))
    except Exception as err:  # pylint: disable=broad-except
        raise ModelImportError(
            f"cannot import {label}: onnx.checker rejects it ({_first_line(err)})"
        ) from None
    try:
        external_data_helper.load_external_data_for_model(model, base)
    except Exception as err:  # pylint: disable=broad-except
        raise ModelImportError(
            f"cannot import {label}: cannot read its external data ({_first_line(err)})"
        ) from None
    return model


def _read_model(source: Any) -> tuple["onnx.ModelProto", str, bool]:
    """Parse ``source`` into a ModelProto; returns it with a name for messages and whether it
    has been checked already (models with external data are checked by path)."""
    import onnx  # pylint: disable=import-outside-toplevel

    if isinstance(source, onnx.ModelProto):
        label = "the given ONNX model"
        external = _external_tensors(source)
        if external:
            raise ModelImportError(
                f"cannot import {label}: tensor '{external[0].name}' is stored as external data "
                "that is not loaded; pass the model's file path (its data files are found next "
                "to it) or load them with onnx.load_external_data_for_model first"
            )
        return source, label, False
    if isinstance(source, (bytes, bytearray, memoryview)):
        label = "the given ONNX model bytes"
        data = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        label = f"ONNX model '{path}'"
        if not os.path.exists(path):
            raise ModelImportError(f"cannot import {label}: no such file") from None
        if os.path.isdir(path):
            raise ModelImportError(f"cannot import {label}: it is a directory") from None
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as err:
            raise ModelImportError(
                f"cannot import {label}: cannot read the file ({err.strerror or err})"
            ) from None
    else:
        raise ModelImportError(
            f"cannot import an ONNX model from a value of type {type(source).__name__}: pass a "
            "file path, the serialized model (bytes) or an onnx.ModelProto"
        )
    if not data:
        raise ModelImportError(f"cannot import {label}: it is empty")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as err:  # pylint: disable=broad-except
        # protobuf raises DecodeError (or RuntimeWarning-like errors) on non-ONNX bytes.
        raise ModelImportError(
            f"cannot import {label}: not a valid ONNX protobuf ({_first_line(err)})"
        ) from None
    external = _external_tensors(model)
    if external and isinstance(source, (str, os.PathLike)):
        return _read_external_model(os.fspath(source), label), label, True
    if external:
        raise ModelImportError(
            f"cannot import {label}: tensor '{external[0].name}' is stored as external data; "
            "pass the model's file path so that its data files are found next to it"
        )
    return model, label, False


def load_onnx(
    source: ModelSource,
    shape_dict: Mapping[str, Sequence[int]] | None = None,
    *,
    dtype_dict: str | Mapping[str, str] | None = None,
    keep_params_in_input: bool = False,
    fold_constants: bool = True,
    allow_symbolic: bool = False,
) -> IRModule:
    """Import an ONNX model as a Relax module with ``tvm.relax.frontend.onnx.from_onnx``.

    Parameters
    ----------
    source : path, bytes or onnx.ModelProto
        The model.
    shape_dict : dict, optional
        Input name -> static shape, for models with symbolic input dimensions (an exporter's
        batch ``N``). Every name must be a graph input, with its rank and fixed dimensions.
    dtype_dict : str or dict, optional
        Input dtypes, when the model's are not to be used (passed to ``from_onnx``).
    keep_params_in_input : bool
        Keep the weights as function parameters instead of constants.
    fold_constants : bool
        Infer shapes and fold constant subgraphs on the ONNX graph first
        (:func:`~tvm_icca.frontend.onnx_prepare.prepare_onnx`): what real exports need, e.g. the
        shape computations of attention heads and GPT-2's scalar ``ConstantOfShape``.
        ``LSTM``, ``GRU`` and ``RNN`` nodes are unrolled whether or not
        (:func:`~tvm_icca.frontend.recurrent.unroll_recurrent`), between two preparations when
        folding: the first makes a computed ``sequence_lens`` constant, the second folds the
        re-arranged weights.
    allow_symbolic : bool
        Import inputs whose dimensions stay symbolic. The chip runs static shapes only, so
        every op that touches them stays on the host; by default such a model is refused with
        the binding to pass (:mod:`tvm_icca.frontend.onnx_inputs`).

    Returns
    -------
    tvm.IRModule
        The Relax module, entry ``main``, ready for :func:`tvm_icca.compile` or
        :func:`tvm_icca.partition_for_icca`.

    Raises
    ------
    ModelImportError
        The model cannot be read, is not valid ONNX, has an ``LSTM``, ``GRU`` or ``RNN`` node with an
        attribute or input the unrolling does not compute (named), or uses an op TVM cannot
        import; a failure inside TVM's importer names the ONNX node (its name and op type). Also a
        ``shape_dict`` that names no input or contradicts one, and (unless ``allow_symbolic``)
        inputs left with symbolic dimensions. A ``Resize`` node TVM's importer would read with
        another meaning and that cannot be written out (an ``antialias`` downsampling, a
        batch or channel resize, scales whose sampling the output sizes do not carry in
        non-float data: :mod:`tvm_icca.frontend.onnx_resize`, which puts the others in the form
        the importer reads).
    """
    model, label, checked = _read_model(source)
    import onnx  # pylint: disable=import-outside-toplevel

    owned = not isinstance(source, onnx.ModelProto)  # read here: prepared in place

    try:
        if not checked:
            onnx.checker.check_model(model)
    except Exception as err:  # pylint: disable=broad-except
        raise ModelImportError(
            f"cannot import {label}: onnx.checker rejects it ({_first_line(err)})"
        ) from None

    from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

    kwargs: dict[str, Any] = {"keep_params_in_input": keep_params_in_input}
    shapes = None
    inputs = graph_inputs(model.graph)
    if shape_dict is not None:
        shapes = kwargs["shape_dict"] = _checked_shapes(shape_dict, label)
        for name, shape in shapes.items():
            problem = shape_problem(inputs, name, shape)
            if problem is not None:
                raise ModelImportError(f"cannot import {label}: shape_dict[{name!r}]: {problem}")
    unbound = unbound_inputs(inputs, shapes)
    if unbound and not allow_symbolic:
        raise ModelImportError(_symbolic_message(label, unbound, shapes))
    # TVM's importer reads a dimension of 0 as "not given" and makes it a symbol, so an input
    # with an empty axis ([2, 0, 3]) came in as [2, v, 3]: its reductions were then neither
    # folded to their identity (FoldEmptyReductions needs static shapes) nor correct on the
    # host (garbage read from an uninitialized accumulator). Its declared shape is bound.
    empty = {name: list(dims) for name, dims in inputs.items()
             if name not in (shapes or {}) and 0 in dims and all(isinstance(d, int) for d in dims)}
    if empty:
        shapes = kwargs["shape_dict"] = {**(shapes or {}), **empty}
    if dtype_dict is not None:
        if not isinstance(dtype_dict, (str, Mapping)):
            raise ModelImportError(f"cannot import {label}: dtype_dict must be a dtype or a mapping "
                                   f"of input names to dtypes, not {type(dtype_dict).__name__}")
        kwargs["dtype_dict"] = dtype_dict if isinstance(dtype_dict, str) else dict(dtype_dict)
    if fold_constants:
        model = prepare_onnx(model, shapes, fold_initializers=not keep_params_in_input,
                             in_place=owned)
        owned = True  # prepare_onnx's copy, when not the reader's
    # TVM's importer drops ConvTranspose's output_shape: the pads it means, per the spec
    padded = explicit_conv_transpose_pads(model, shapes, in_place=owned, label=label)
    owned, model = owned or padded is not model, padded
    if has_recurrent(model):
        # after folding (a constant sequence_lens computed in the graph is a constant now);
        # the unrolled weight re-arrangements are then folded in turn
        try:
            model = unroll_recurrent(model, None if fold_constants else shapes, in_place=owned)
        except ModelImportError as err:
            raise ModelImportError(f"cannot import {label}: {err}") from None
        owned = True
        if fold_constants:
            model = prepare_onnx(model, fold_initializers=not keep_params_in_input, in_place=True)
    try:
        # after folding, which makes the scales and sizes computed from shapes constants
        model = prepare_resizes(model, in_place=owned)
    except ResizeRefusal as refusal:
        raise ModelImportError(
            f"cannot import {label}: {describe_node(refusal.node)} {refusal.reason}") from None
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            # from_onnx re-runs the checker and only warns (we already checked), and prints
            # the Relax inputs of a node it fails on (the error below names the node).
            warnings.simplefilter("ignore")
            mod = from_onnx(model, **kwargs)
    except tvm.error.OpNotImplemented as err:
        detail = _first_line(err)
        ops = detail.rsplit(":", 1)[-1].strip() if ":" in detail else detail
        raise ModelImportError(
            f"cannot import {label}: it uses operators TVM's ONNX importer does not support: {ops}"
        ) from None
    except Exception as err:  # pylint: disable=broad-except
        node = _failing_node(err)
        where = f" at {describe_node(node)}" if node is not None else ""
        raise ModelImportError(
            f"cannot import {label}: TVM's ONNX importer failed{where} with "
            f"{type(err).__name__}: {_first_line(err)}"
        ) from None
    # the op types, for the partition report to name host ops as the model does (Einsum)
    return mod.with_attr(ONNX_OPS_ATTR, sorted({node.op_type for node in model.graph.node}))


def _failing_node(err: BaseException) -> "onnx.NodeProto | None":
    """The ONNX node TVM's importer was converting when ``err`` was raised: the innermost
    frame of the traceback that holds a ``NodeProto`` (the importer converts node by node,
    subgraphs of If included). Reading the traceback costs nothing on success and needs no
    change to the importer."""
    import onnx  # pylint: disable=import-outside-toplevel

    found = None
    tb = err.__traceback__
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, onnx.NodeProto):
                found = value
                break
        tb = tb.tb_next
    return found


def _symbolic_message(label: str, unbound: Mapping[str, Dims], shapes: Mapping | None) -> str:
    """The one error for inputs left symbolic: which, and the binding to pass."""
    suggestion = {**(shapes or {}), **suggested_shapes(unbound)}
    return (f"cannot import {label}: the chip runs static shapes, and input(s) "
            f"{listed_inputs(unbound)} have symbolic dimensions; bind them, e.g. "
            f"shape_dict={suggestion} (tvm-icca: {shape_flags(suggestion)}), "
            "or pass allow_symbolic=True to import them for the host only")


def _checked_shapes(shape_dict: Any, label: str) -> dict[str, list[int]]:
    """``shape_dict`` as ``{input name: [positive ints]}``, or one clear error."""
    if not isinstance(shape_dict, Mapping):
        raise ModelImportError(f"cannot import {label}: shape_dict must map input names to shapes, "
                               f"not {type(shape_dict).__name__}")
    out = {}
    for name, shape in shape_dict.items():
        dims = list(shape) if isinstance(shape, (list, tuple)) else None
        if not isinstance(name, str) or dims is None or any(
            isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 0 for d in dims
        ):
            # 0 is a size (an empty tensor, valid in ONNX); negative sizes are not
            raise ModelImportError(f"cannot import {label}: shape_dict[{name!r}] = {shape!r} is not a "
                                   "list of non-negative integers")
        out[name] = [int(d) for d in dims]
    return out
