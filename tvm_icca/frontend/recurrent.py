"""ONNX ``LSTM``, ``GRU`` and ``RNN`` unrolled over their static sequence length, before TVM's
importer.

TVM 0.27's ONNX importer has no converter for the recurrent operators. The chip runs static
shapes, so the sequence length of every recurrent node it runs is known, and
:func:`unroll_recurrent` writes each ``LSTM``, ``GRU`` and ``RNN`` node as the computation its
ONNX operator specification defines step by step (LSTM-7/14/22, GRU-7/14/22, RNN-7/14/22: the
same equations, ``layout`` from version 14), in ONNX operators TVM imports and the chip runs:
MatMul, Add, Sub, Mul, Sigmoid, Tanh, Relu, Split, Concat, Reshape and Transpose. (The
TorchScript exporter writes ``nn.RNN`` as an ``RNN`` node; the dynamo exporter unrolls it
itself.)

* The input projection of every step and both directions, ``X W^T + Wb + Rb``, is one MatMul
  over the ``seq x batch`` rows of ``X`` (the directions' weights side by side), before the
  recurrence; each step then adds ``H_{t-1} R^T`` and applies the gates. The specification's
  gate orders put the gates that share an activation next to each other (LSTM ``iofc``: one
  Sigmoid over ``i, o, f``; GRU ``zrh``: one over ``z, r``).
* GRU's ``linear_before_reset = 0`` multiplies ``r`` into ``H_{t-1}`` before its product with
  ``Rh``, so ``Rh`` has a step product of its own; with 1, one product per step gives all
  three gates and ``Rbh`` is added inside the reset (it cannot join the projection's bias).
* An absent ``initial_h`` / ``initial_c`` is zero, as is a constant zero one (what PyTorch
  exports when no state is given): the first step has no recurrent product and
  ``C_1 = i * c`` (no zero tensors are made; a symbolic batch stays symbolic).
* GRU's ``H_t = (1 - z) * h + z * H_{t-1}`` is written ``h + z * (H_{t-1} - h)``, which
  needs no constant of the data's dtype.
* RNN's one gate is ``H_t = f(x W^T + H_{t-1} R^T + Wb + Rb)``, with ``f`` the direction's
  activation: Tanh (the default), Relu (``nn.RNN(nonlinearity="relu")``) or Sigmoid.
* ``Y`` (``[seq, num_directions, batch, hidden]``, or ``[batch, seq, num_directions,
  hidden]`` with ``layout = 1``), ``Y_h`` and ``Y_c`` are one Concat and one Reshape each,
  written to the node's own output names, so graph outputs keep their names and dtypes.

The re-arrangements of the weights (transposes, bias sums, the split per direction) are ops
on ``W``, ``R`` and ``B``: :func:`~tvm_icca.frontend.onnx_prepare.prepare_onnx` folds them into
constants when the weights are initializers, and they are views on the chip when the weights
are graph inputs. New tensors and nodes are named ``<node name>/<what>``, with ``d<k>`` for
the direction and ``t<k>`` for the step.

What the unrolling does not compute is refused with one
:class:`~runtime_sim.contract.errors.ModelImportError` naming the node and the attribute or
input: peephole weights ``P`` (unless absent or a constant zero), ``clip``, activations
other than the defaults (LSTM Sigmoid, Tanh, Tanh and GRU Sigmoid, Tanh, per direction) and
RNN's three (``activation_alpha`` / ``activation_beta`` are unused by those and ignored), LSTM
``input_forget = 1``, a ``sequence_lens`` that is not a constant equal to the sequence length
for every batch entry, and a symbolic sequence length. Recurrent nodes inside subgraphs (an
``If`` branch, a ``Loop`` body) are left to TVM's importer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from runtime_sim.contract.errors import ModelImportError
from tvm_icca.frontend.onnx_prepare import (
    DEFAULT_DOMAINS,
    constant_node,
    constant_value,
    default_opset,
    describe_node,
    inferred_types,
    set_input_shapes,
)

if TYPE_CHECKING:  # onnx is imported lazily: `import tvm` autoloads this package
    import onnx

__all__ = ["RECURRENT_OPS", "has_recurrent", "unroll_recurrent"]

@dataclass(frozen=True)
class _Cell:
    """What the ONNX specification fixes for one recurrent operator."""

    gates: int
    #: The default activations of one direction (f, g[, h]).
    activations: tuple[str, ...]
    #: The inputs by position, as the specification names them.
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    #: The activations one direction may have instead, per position (RNN's f; empty: only
    #: the defaults), as ONNX op types.
    choices: tuple[tuple[str, ...], ...] = ()


_CELLS: dict[str, _Cell] = {
    "LSTM": _Cell(4, ("Sigmoid", "Tanh", "Tanh"),
                  ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
                  ("Y", "Y_h", "Y_c")),
    "GRU": _Cell(3, ("Sigmoid", "Tanh"),
                 ("X", "W", "R", "B", "sequence_lens", "initial_h"), ("Y", "Y_h")),
    "RNN": _Cell(1, ("Tanh",), ("X", "W", "R", "B", "sequence_lens", "initial_h"), ("Y", "Y_h"),
                 choices=(("Tanh", "Relu", "Sigmoid"),)),
}

#: The ONNX op types :func:`unroll_recurrent` rewrites.
RECURRENT_OPS: tuple[str, ...] = tuple(sorted(_CELLS))

_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}

#: LSTM-7, GRU-7 and RNN-7 are the versions with today's inputs and attributes, and opset 7 the
#: first whose Add, Sub and Mul broadcast like numpy, as the unrolled graph needs.
_MIN_OPSET = 7
#: Split takes its sizes as an input from opset 13, as an attribute before.
_SPLIT_SIZES_AS_INPUT = 13


def has_recurrent(model: "onnx.ModelProto") -> bool:
    """Whether ``model``'s main graph has an ONNX ``LSTM``, ``GRU`` or ``RNN`` node."""
    return any(n.op_type in _CELLS and n.domain in DEFAULT_DOMAINS for n in model.graph.node)


def unroll_recurrent(
    model: "onnx.ModelProto",
    shape_dict: Mapping[str, Sequence[int]] | None = None,
    *,
    in_place: bool = False,
) -> "onnx.ModelProto":
    """``model`` with every ``LSTM``, ``GRU`` and ``RNN`` node of its main graph unrolled (see
    the module): a copy, or ``model`` itself changed when ``in_place``.

    Parameters
    ----------
    model : onnx.ModelProto
        A model ``onnx.checker`` accepts (nodes in topological order).
    shape_dict : dict, optional
        Input name -> static shape, written into the graph inputs first (as
        :func:`~tvm_icca.frontend.onnx_prepare.prepare_onnx` does), so that a sequence length
        given only there is static.
    in_place : bool
        Change ``model`` rather than a copy.

    Returns
    -------
    onnx.ModelProto
        The model with the same inputs, outputs and initializers, and no recurrent node.

    Raises
    ------
    ModelImportError
        A recurrent node uses what the unrolling does not compute (see the module); the
        message names the node and the attribute or input.
    """
    import onnx  # pylint: disable=import-outside-toplevel

    out = model
    if not in_place:
        out = onnx.ModelProto()
        out.CopyFrom(model)
    if not has_recurrent(out):
        return out
    graph = out.graph
    if shape_dict:
        set_input_shapes(graph, shape_dict)
    opset = default_opset(out)
    types = {name: shape for name, (_, shape) in inferred_types(out).items()}
    names = _taken_names(graph)
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type in _CELLS and node.domain in DEFAULT_DOMAINS:
            spec = _read_spec(node, graph, types, opset)
            emitter = _Emitter(node.name or f"{node.op_type}_{_first_output(node)}", names, opset)
            _emit(spec, emitter)
            nodes.extend(_live(emitter.nodes, [o for o in node.output if o]))
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return out


# -- reading a node -----------------------------------------------------------------------
@dataclass
class _Spec:
    """One recurrent node as the unrolling needs it."""

    op: str
    cell: _Cell
    inputs: dict[str, str]  # spec input name -> tensor (absent inputs left out)
    outputs: dict[str, str]  # spec output name -> tensor (absent outputs left out)
    directions: int
    reverse: bool  # direction "reverse" (a bidirectional node's direction 1 always is)
    layout: int
    seq: int
    hidden: int
    linear_before_reset: bool
    #: per direction, its activations (ONNX op types)
    activations: tuple[tuple[str, ...], ...]


def _first_output(node: "onnx.NodeProto") -> str:
    return next((o for o in node.output if o), "out")


def _read_spec(node: "onnx.NodeProto", graph: "onnx.GraphProto",
               types: Mapping[str, tuple[int | None, ...] | None], opset: int) -> _Spec:
    """The node's inputs, outputs and attributes, or the error for what is not supported."""
    import onnx  # pylint: disable=import-outside-toplevel

    cell = _CELLS[node.op_type]
    where = describe_node(node)

    def refuse(problem: str) -> ModelImportError:
        return ModelImportError(f"{where} cannot be unrolled: {problem}")

    if opset < _MIN_OPSET:
        raise refuse(f"the model's opset {opset} is older than {node.op_type}-{_MIN_OPSET}, the "
                     "first version tvm_icca unrolls; convert the model to a newer opset")
    attrs: dict[str, Any] = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    direction = _text(attrs.get("direction", "forward"))
    if direction not in _DIRECTIONS:
        raise refuse(f"attribute direction={direction!r} is none of {', '.join(_DIRECTIONS)}")
    directions = _DIRECTIONS[direction]
    layout = int(attrs.get("layout", 0))
    if layout not in (0, 1):
        raise refuse(f"attribute layout={layout} is neither 0 nor 1")
    if "clip" in attrs:
        raise refuse(f"attribute clip={attrs['clip']:g} (the clipping of the gates' inputs) is "
                     "not supported; export without clip")
    activations = (cell.activations,) * directions
    if "activations" in attrs:
        activations = _activations([_text(a) for a in attrs["activations"]], cell, directions,
                                   refuse)
    if int(attrs.get("input_forget", 0)):
        raise refuse("attribute input_forget=1 (input and forget gates coupled) is not "
                     "supported: only input_forget=0 is")

    inputs = {role: name for role, name in zip(cell.inputs, node.input) if name}
    outputs = {role: name for role, name in zip(cell.outputs, node.output) if name}
    if "P" in inputs:
        value = _constant(graph, inputs["P"], opset)
        if value is None or np.any(value):
            raise refuse(f"input P '{inputs['P']}' (peephole weights) is not supported: only an "
                         "LSTM without peepholes (P absent, empty or a constant zero) is")
        del inputs["P"]
    for role in ("initial_h", "initial_c"):
        # a constant zero state is an absent one (PyTorch exports write zeros when none is
        # given): the first step then skips its products with R
        value = _constant(graph, inputs[role], opset) if role in inputs else None
        if value is not None and not np.any(value):
            del inputs[role]

    x_shape = types.get(inputs["X"])
    if x_shape is None or len(x_shape) != 3:
        raise refuse(f"the rank of input X '{inputs['X']}' is unknown or not 3 "
                     f"({_dims(x_shape)}), so its sequence length is not known")
    seq = x_shape[layout]
    batch = x_shape[1 - layout]
    if seq is None:
        raise refuse(f"input X '{inputs['X']}' {_dims(x_shape)} has a symbolic sequence length "
                     f"(dimension {layout}); bind it to a static size (load_onnx's shape_dict)")
    if seq == 0:
        raise refuse(f"input X '{inputs['X']}' {_dims(x_shape)} has an empty sequence")
    if "sequence_lens" in inputs:
        _check_sequence_lens(graph, inputs["sequence_lens"], seq, opset, refuse)
        del inputs["sequence_lens"]

    hidden = attrs.get("hidden_size")
    r_shape = types.get(inputs["R"])
    if hidden is None:
        if r_shape is None or len(r_shape) != 3 or r_shape[2] is None:
            raise refuse(f"attribute hidden_size is absent and the shape of input R "
                         f"'{inputs['R']}' ({_dims(r_shape)}) does not give it")
        hidden = r_shape[2]
    hidden = int(hidden)
    gates = cell.gates * hidden
    state = (directions, batch, hidden) if layout == 0 else (batch, directions, hidden)
    expected = {"W": (directions, gates, x_shape[2]), "R": (directions, gates, hidden),
                "B": (directions, 2 * gates), "initial_h": state, "initial_c": state}
    for role, want in expected.items():
        got = types.get(inputs.get(role, ""))
        if got is not None and (len(got) != len(want) or any(
                g is not None and w is not None and g != w for g, w in zip(got, want))):
            raise refuse(f"input {role} '{inputs[role]}' has shape {_dims(got)}, the "
                         f"specification's {_dims(want)} for direction={direction!r}, "
                         f"hidden_size={hidden}, layout={layout}")
    return _Spec(node.op_type, cell, inputs, outputs, directions, direction == "reverse", layout,
                 int(seq), hidden, bool(int(attrs.get("linear_before_reset", 0))), activations)


def _activations(given: list[str], cell: _Cell, directions: int,
                 refuse: Any) -> tuple[tuple[str, ...], ...]:
    """The ``activations`` attribute per direction, as ONNX op types: the defaults, or (RNN)
    one of the choices at each position; anything else is refused."""
    per = len(cell.activations)
    choices = cell.choices or tuple((a,) for a in cell.activations)
    names = {c.lower(): c for options in choices for c in options}
    chosen = [names.get(a.lower()) for a in given]
    fits = len(given) == per * directions and all(
        c is not None and c in choices[k % per] for k, c in enumerate(chosen))
    if not fits:
        allowed = (" or ".join("/".join(options) for options in cell.choices) if cell.choices
                   else ", ".join(cell.activations))
        raise refuse(f"attribute activations={given} is not supported: only "
                     f"{'the default ' if not cell.choices else ''}{allowed} per direction "
                     f"{'are' if not cell.choices else 'is'}")
    return tuple(tuple(chosen[d * per:(d + 1) * per]) for d in range(directions))


def _check_sequence_lens(graph: "onnx.GraphProto", name: str, seq: int, opset: int,
                         refuse: Any) -> None:
    """``sequence_lens`` must be a constant giving every batch entry the whole sequence."""
    value = _constant(graph, name, opset)
    if value is None:
        raise refuse(f"input sequence_lens '{name}' is not a constant: tvm_icca unrolls every "
                     "batch entry over the whole sequence, so it must be a constant equal to "
                     f"the sequence length {seq} (or absent)")
    if np.any(value != seq):
        raise refuse(f"input sequence_lens '{name}' = {value.tolist()} varies or differs from the "
                     f"sequence length {seq}: only full-length sequences are supported")


def _constant(graph: "onnx.GraphProto", name: str, opset: int) -> np.ndarray | None:
    """The value of tensor ``name`` when it is a constant: an initializer that is not a graph
    input (one that is may be fed another value) or a ``Constant`` node's output."""
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel

    if name in {i.name for i in graph.input}:
        return None
    for tensor in graph.initializer:
        if tensor.name == name:
            return numpy_helper.to_array(tensor)
    for node in graph.node:
        if name in node.output:
            if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
                return constant_value(node, opset)
            return None
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _dims(shape: Sequence[int | None] | None) -> str:
    if shape is None:
        return "rank unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _taken_names(graph: "onnx.GraphProto") -> set[str]:
    """Every tensor and node name of the graph (new names must differ from all of them)."""
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    names.update(t.name for t in graph.initializer)
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        names.add(node.name)
    return names


# -- writing the unrolled graph -----------------------------------------------------------
class _Emitter:
    """Appends ONNX nodes named ``<prefix>/<tag>``, in the forms of the model's opset."""

    def __init__(self, prefix: str, names: set[str], opset: int) -> None:
        self.prefix = prefix
        self.names = names
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self._ints: dict[tuple[int, ...], str] = {}  # one Constant per value (shapes, sizes)

    def fresh(self, tag: str) -> str:
        base = name = f"{self.prefix}/{tag}"
        k = 0
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def op(self, op_type: str, inputs: Sequence[str], tag: str, out: str | None = None,
           **attrs: Any) -> str:
        """One node with one output (``out``, else a fresh name); returns the output."""
        import onnx  # pylint: disable=import-outside-toplevel

        name = self.fresh(tag)
        result = out or name
        self.nodes.append(onnx.helper.make_node(op_type, list(inputs), [result], name=name,
                                                **attrs))
        return result

    def ints(self, values: Sequence[int], tag: str) -> str:
        key = tuple(int(v) for v in values)
        if key not in self._ints:
            name = self._ints[key] = self.fresh(tag)
            self.nodes.append(constant_node(name, name, np.asarray(key, dtype=np.int64)))
        return self._ints[key]

    def reshape(self, x: str, shape: Sequence[int], tag: str, out: str | None = None) -> str:
        return self.op("Reshape", [x, self.ints(shape, f"{tag}_shape")], tag, out)

    def split(self, x: str, axis: int, sizes: Sequence[int], tag: str) -> list[str]:
        """``x`` split along ``axis`` into pieces of ``sizes`` (one piece: ``x`` itself)."""
        import onnx  # pylint: disable=import-outside-toplevel

        if len(sizes) == 1:
            return [x]
        name = self.fresh(tag)
        outputs = [f"{name}_{k}" for k in range(len(sizes))]
        self.names.update(outputs)
        if self.opset >= _SPLIT_SIZES_AS_INPUT:
            node = onnx.helper.make_node("Split", [x, self.ints(sizes, f"{tag}_sizes")], outputs,
                                         name=name, axis=axis)
        else:
            node = onnx.helper.make_node("Split", [x], outputs, name=name, axis=axis,
                                         split=list(sizes))
        self.nodes.append(node)
        return outputs

    def concat(self, pieces: Sequence[str], axis: int, tag: str) -> str:
        return pieces[0] if len(pieces) == 1 else self.op("Concat", pieces, tag, axis=axis)


def _emit(spec: _Spec, em: _Emitter) -> None:
    """The unrolled computation of ``spec`` (see the module), its outputs under their names."""
    dirs, hid, seq = spec.directions, spec.hidden, spec.seq
    gates = spec.cell.gates * hid
    lbr = spec.op == "GRU" and spec.linear_before_reset

    # the input projection of every step and direction: one MatMul, [seq|batch, ., D * G]
    w_t = em.op("Transpose", [spec.inputs["W"]], "W_t", perm=[2, 0, 1])  # [I, D, G]
    w_t = em.reshape(w_t, [-1, dirs * gates], "W_t_dirs")
    proj = em.op("MatMul", [spec.inputs["X"], w_t], "x_proj")
    step_bias: list[str | None] = [None] * dirs  # GRU, linear_before_reset: Rbh per direction
    if "B" in spec.inputs:
        if lbr:  # Rbh is added inside the reset gate, per step
            wb_zr, wb_h, rb_zr, rb_h = em.split(spec.inputs["B"], 1, [2 * hid, hid] * 2, "B")
            bias = em.concat([em.op("Add", [wb_zr, rb_zr], "B_zr"), wb_h], 1, "B_sum")
            step_bias = [em.reshape(b, [-1], f"d{d}/Rb_h")
                         for d, b in enumerate(em.split(rb_h, 0, [1] * dirs, "Rb_h"))]
        else:
            wb, rb = em.split(spec.inputs["B"], 1, [gates, gates], "B")
            bias = em.op("Add", [wb, rb], "B_sum")
        proj = em.op("Add", [proj, em.reshape(bias, [-1], "B_dirs")], "x_proj_bias")
    # its rows of step t, direction d: [batch, G]
    x_gates = [em.split(em.reshape(p, [-1, dirs * gates], f"t{t}/x_proj"), 1, [gates] * dirs,
                        f"t{t}/x_proj")
               for t, p in enumerate(em.split(proj, spec.layout, [1] * seq, "x_proj"))]

    r_t = em.op("Transpose", [spec.inputs["R"]], "R_t", perm=[0, 2, 1])  # [D, H, G]
    r_dir = [em.reshape(r, [-1, gates], f"d{d}/R_t")
             for d, r in enumerate(em.split(r_t, 0, [1] * dirs, "R_t"))]
    if spec.op == "GRU" and not lbr:  # Rh's product waits for r: [H, 2H] and [H, H]
        r_dir = [em.split(r, 1, [2 * hid, hid], f"d{d}/R_t") for d, r in enumerate(r_dir)]
    else:
        r_dir = [[r] for r in r_dir]
    h_0 = _initial_states(em, spec, "initial_h")
    c_0 = _initial_states(em, spec, "initial_c") if spec.op == "LSTM" else [None] * dirs

    ys: dict[tuple[int, int], str] = {}
    last_h, last_c = [], []
    for d in range(dirs):
        backwards = spec.reverse or d == 1
        h, c = h_0[d], c_0[d]
        for t in (reversed(range(seq)) if backwards else range(seq)):
            tag = f"d{d}/t{t}"
            if spec.op == "LSTM":
                h, c = _lstm_step(em, tag, x_gates[t][d], h, c, r_dir[d][0], hid)
            elif spec.op == "GRU":
                h = _gru_step(em, tag, x_gates[t][d], h, r_dir[d], hid, step_bias[d])
            else:
                h = _rnn_step(em, tag, x_gates[t][d], h, r_dir[d][0], spec.activations[d][0])
            ys[t, d] = h
        last_h.append(h)
        last_c.append(c)

    finals = {"Y": ([ys[t, d] for t in range(seq) for d in range(dirs)], [seq, dirs]),
              "Y_h": (last_h, [dirs]), "Y_c": (last_c, [dirs])}
    for role, name in spec.outputs.items():
        pieces, lead = finals[role]
        # pieces [batch, H] in row-major order of the leading axes: concatenated on the batch
        # axis (layout 0, batch inside) or on the hidden axis (layout 1, batch outside)
        joined = em.concat(pieces, spec.layout, role)
        shape = [*lead, -1, hid] if spec.layout == 0 else [-1, *lead, hid]
        em.reshape(joined, shape, role, out=name)


def _initial_states(em: _Emitter, spec: _Spec, role: str) -> list[str | None]:
    """Per direction, the initial state ``[batch, H]``, or None (zero) when absent."""
    if role not in spec.inputs:
        return [None] * spec.directions
    parts = em.split(spec.inputs[role], spec.layout, [1] * spec.directions, role)
    return [em.reshape(p, [-1, spec.hidden], f"d{d}/{role}") for d, p in enumerate(parts)]


def _lstm_step(em: _Emitter, tag: str, x_gates: str, h: str | None, c: str | None,
               r_t: str, hid: int) -> tuple[str, str]:
    """One LSTM step (ONNX LSTM, default activations, no peepholes): gates ``iofc``."""
    pre = x_gates if h is None else em.op(
        "Add", [x_gates, em.op("MatMul", [h, r_t], f"{tag}/h_R")], f"{tag}/gates")
    sig_in, c_in = em.split(pre, 1, [3 * hid, hid], f"{tag}/gates")
    i, o, f = em.split(em.op("Sigmoid", [sig_in], f"{tag}/iof"), 1, [hid] * 3, f"{tag}/iof")
    ic = em.op("Mul", [i, em.op("Tanh", [c_in], f"{tag}/c_cand")], f"{tag}/i_c")
    c_new = ic if c is None else em.op("Add", [em.op("Mul", [f, c], f"{tag}/f_C"), ic],
                                       f"{tag}/C")
    h_new = em.op("Mul", [o, em.op("Tanh", [c_new], f"{tag}/tanh_C")], f"{tag}/H")
    return h_new, c_new


def _gru_step(em: _Emitter, tag: str, x_gates: str, h: str | None, r_t: Sequence[str],
              hid: int, rb_h: str | None) -> str:
    """One GRU step (ONNX GRU, default activations): gates ``zrh``. ``r_t``: ``[R^T]`` with
    ``linear_before_reset``, else ``[Rzr^T, Rh^T]``."""
    x_zr, x_h = em.split(x_gates, 1, [2 * hid, hid], f"{tag}/x")
    if len(r_t) == 1:
        # h = tanh(x Wh^T + Wbh + r * (H Rh^T + Rbh)): one product gives all three gates
        h_zr, h_h = (None, rb_h) if h is None else em.split(
            em.op("MatMul", [h, r_t[0]], f"{tag}/h_R"), 1, [2 * hid, hid], f"{tag}/h_R")
        if h is not None and rb_h is not None:
            h_h = em.op("Add", [h_h, rb_h], f"{tag}/h_Rh_b")
        zr_in = x_zr if h_zr is None else em.op("Add", [x_zr, h_zr], f"{tag}/zr_in")
        z, r = em.split(em.op("Sigmoid", [zr_in], f"{tag}/zr"), 1, [hid, hid], f"{tag}/zr")
        cand_in = x_h if h_h is None else em.op(
            "Add", [x_h, em.op("Mul", [r, h_h], f"{tag}/r_hRh")], f"{tag}/cand_in")
    else:
        # h = tanh(x Wh^T + (r * H) Rh^T + Wbh + Rbh): Rh's product waits for r
        r_zr, r_h = r_t
        zr_in = x_zr if h is None else em.op(
            "Add", [x_zr, em.op("MatMul", [h, r_zr], f"{tag}/h_Rzr")], f"{tag}/zr_in")
        z, r = em.split(em.op("Sigmoid", [zr_in], f"{tag}/zr"), 1, [hid, hid], f"{tag}/zr")
        cand_in = x_h if h is None else em.op(
            "Add", [x_h, em.op("MatMul", [em.op("Mul", [r, h], f"{tag}/r_H"), r_h],
                               f"{tag}/rH_Rh")], f"{tag}/cand_in")
    cand = em.op("Tanh", [cand_in], f"{tag}/cand")
    if h is None:  # (1 - z) * cand
        return em.op("Sub", [cand, em.op("Mul", [z, cand], f"{tag}/z_cand")], f"{tag}/H")
    # (1 - z) * cand + z * H, as cand + z * (H - cand)
    diff = em.op("Sub", [h, cand], f"{tag}/H_cand")
    return em.op("Add", [cand, em.op("Mul", [z, diff], f"{tag}/z_diff")], f"{tag}/H")


def _rnn_step(em: _Emitter, tag: str, x_gates: str, h: str | None, r_t: str,
              activation: str) -> str:
    """One RNN step (ONNX RNN): ``f(x W^T + Wb + Rb + H R^T)``, ``f`` the ``activation`` op."""
    pre = x_gates if h is None else em.op(
        "Add", [x_gates, em.op("MatMul", [h, r_t], f"{tag}/h_R")], f"{tag}/pre")
    return em.op(activation, [pre], f"{tag}/H")


def _live(nodes: list["onnx.NodeProto"], wanted: Sequence[str]) -> list["onnx.NodeProto"]:
    """The nodes some of ``wanted`` depends on, in their order (an output nobody asked for,
    e.g. the last step's H when only Y_c is, is not computed)."""
    needed = set(wanted)
    kept = []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(node.input)
    return kept[::-1]
