"""ONNX LSTM, GRU and RNN unrolled in the frontend (tvm_icca.frontend.recurrent): the unrolled graph
computes what the node computes (onnx.reference.ReferenceEvaluator on both, many attribute
combinations), compiled for the chip it runs there whole and gives the ONNX project's expected
outputs and the reference's, and what it does not compute is refused by name."""

from __future__ import annotations

import itertools
import re

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tvm import relax

import tvm_icca
from runtime_sim.contract.presets import small_chip
from tvm_icca.frontend.recurrent import unroll_recurrent
from tvm_icca.testing.onnx_node_cases import inputs_as_initializers, node_cases

# A small chip keeps plans multi-core on these tiny tensors: 16 cores of 16 KiB.
HW = small_chip(16, 16 * 1024)
#: float32 against the reference: the chip's sums may be ordered differently.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
#: The inputs (before the peepholes) and outputs, as the ONNX specification orders them.
INPUTS = {"LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c"),
          "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
          "RNN": ("X", "W", "R", "B", "sequence_lens", "initial_h")}
OUTPUTS = {"LSTM": ("Y", "Y_h", "Y_c"), "GRU": ("Y", "Y_h"), "RNN": ("Y", "Y_h")}


def _model(op: str, *, hidden: int = 3, seq: int = 3, batch: int = 2, size: int = 4,
           direction: str = "forward", layout: int = 0, bias: bool = True,
           initial: bool = True, outputs: tuple[str, ...] | None = None,
           graph_inputs: tuple[str, ...] = (), opset: int = 22, head: bool = False,
           seed: int = 0, seq_dim: int | str | None = None,
           **attrs) -> tuple[onnx.ModelProto, dict]:
    """One LSTM, GRU or RNN node (name "rnn") with random weights as initializers, except the
    tensors named in ``graph_inputs``; ``head``: its Y (one direction) goes on to a MatMul and
    an Add, as an exported classifier's does. Returns the model and its input values."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op] * hidden
    x_shape = [seq, batch, size] if layout == 0 else [batch, seq, size]
    state = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    values = {"X": rng.standard_normal(x_shape),
              "W": rng.standard_normal((dirs, gates, size)) * 0.5,
              "R": rng.standard_normal((dirs, gates, hidden)) * 0.5}
    if bias:
        values["B"] = rng.standard_normal((dirs, 2 * gates)) * 0.5
    if initial:
        values["initial_h"] = rng.standard_normal(state)
        if op == "LSTM":
            values["initial_c"] = rng.standard_normal(state)
    values = {k: v.astype(np.float32) for k, v in values.items()}
    node_inputs = [name if name in values else "" for name in INPUTS[op]]
    while node_inputs[-1] == "":
        node_inputs.pop()
    outputs = outputs or OUTPUTS[op]
    node_outputs = [name if name in outputs else "" for name in OUTPUTS[op]]
    while node_outputs[-1] == "":
        node_outputs.pop()
    if layout:
        attrs["layout"] = layout
    nodes = [helper.make_node(op, node_inputs, node_outputs, name="rnn", hidden_size=hidden,
                              direction=direction, **attrs)]
    out_shapes = {"Y": [seq, dirs, batch, hidden] if layout == 0 else [batch, seq, dirs, hidden],
                  "Y_h": state, "Y_c": state}
    graph_outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, out_shapes[o])
                     for o in outputs]
    initializers = []
    if head:  # Y [seq, 1, batch, H] -> [seq, batch, H] @ [H, 5] + b
        values["head_w"] = rng.standard_normal((hidden, 5)).astype(np.float32)
        values["head_b"] = rng.standard_normal(5).astype(np.float32)
        initializers.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
        nodes += [helper.make_node("Squeeze", ["Y", "axis1"], ["y3"], name="squeeze"),
                  helper.make_node("MatMul", ["y3", "head_w"], ["logits0"], name="head"),
                  helper.make_node("Add", ["logits0", "head_b"], ["logits"], name="head_bias")]
        graph_outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                       [seq, batch, 5])]
    feeds, inputs = {}, []
    for name, value in values.items():
        if name == "X" or name in graph_inputs:
            shape = list(value.shape)
            if name == "X" and seq_dim is not None:
                shape[layout] = seq_dim
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
            feeds[name] = value
        else:
            initializers.append(numpy_helper.from_array(value, name))
    graph = helper.make_graph(nodes, "g", inputs, graph_outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model, feeds


def _reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, feeds)


def _on_chip(model: onnx.ModelProto, feeds: dict) -> tuple[list[np.ndarray], dict]:
    """The model loaded, compiled for the chip and run on the functional device; its outputs
    and the partition report."""
    mod = tvm_icca.load_onnx(model)
    partitioned = tvm_icca.partition_for_icca(mod, hw=HW)
    report = tvm_icca.partition_report(partitioned)
    vm = relax.VirtualMachine(tvm_icca.compile(partitioned, HW), tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(feeds[i.name]))
                          for i in model.graph.input if i.name in feeds])
    got = [result.numpy()] if hasattr(result, "numpy") else [r.numpy() for r in result]
    return got, report


def _assert_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, **TOLERANCE)


def _all_on_chip(report: dict) -> None:
    assert report["host_ops"] == {}, report["host_sources"]
    assert len(report["regions"]) == 1


# -- the ONNX project's node test cases -----------------------------------------------------
CASES = node_cases("LSTM", "GRU", "RNN")
#: Cases the unrolling refuses, and the words that name why.
REFUSED = {"test_lstm_with_peepholes": "input P 'P' (peephole weights) is not supported"}


def test_the_node_cases_are_all_here():
    assert len(CASES) == 18 and set(REFUSED) <= set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case_on_the_chip(name):
    case = CASES[name]
    inputs, expected = case.data_sets[0]
    # sequence_lens (int32) as the constant it must be
    model, values = inputs_as_initializers(case.model, list(inputs), lambda v: v.dtype.kind in "iu")
    feeds = {i.name: v for i, v in zip(model.graph.input, values)}
    if name in REFUSED:
        with pytest.raises(tvm_icca.ModelImportError, match=re.escape(REFUSED[name])):
            tvm_icca.load_onnx(model)
        return
    got, report = _on_chip(model, feeds)
    _assert_close(got, list(expected))
    _all_on_chip(report)


# -- models built here, compiled for the chip -----------------------------------------------
CHIP_MODELS = {
    "lstm_bidirectional_layout0": dict(op="LSTM", direction="bidirectional"),
    "lstm_bidirectional_layout1": dict(op="LSTM", direction="bidirectional", layout=1),
    "lstm_states_as_inputs": dict(op="LSTM", direction="bidirectional", layout=1,
                                  graph_inputs=("initial_h", "initial_c")),
    "gru_linear_before_reset0": dict(op="GRU", direction="bidirectional"),
    "gru_linear_before_reset1": dict(op="GRU", direction="bidirectional",
                                     linear_before_reset=1),
    # opset 11: Split's sizes are an attribute
    "lstm_reverse_opset11": dict(op="LSTM", direction="reverse", seq=4, initial=False, opset=11),
    "gru_reverse_lbr1": dict(op="GRU", direction="reverse", linear_before_reset=1, seq=4,
                             initial=False),
    "lstm_matmul_head": dict(op="LSTM", outputs=("Y",), head=True, seq=4, hidden=4),
    "rnn_bidirectional_layout1": dict(op="RNN", direction="bidirectional", layout=1),
}


@pytest.mark.parametrize("name", sorted(CHIP_MODELS))
def test_model_on_the_chip(name):
    model, feeds = _model(**CHIP_MODELS[name])
    got, report = _on_chip(model, feeds)
    _assert_close(got, _reference(model, feeds))
    _all_on_chip(report)


def test_the_input_projection_is_one_matmul():
    """X W^T for every step and both directions is one MatMul reading X (rows seq x batch);
    each step after the first multiplies H by R^T (the first starts from zero)."""
    seq = 4
    model, _ = _model("LSTM", seq=seq, direction="bidirectional", initial=False)
    nodes = unroll_recurrent(model).graph.node
    matmuls = [n for n in nodes if n.op_type == "MatMul"]
    assert [n.input[0] for n in matmuls].count("X") == 1
    assert len(matmuls) == 1 + 2 * (seq - 1)
    assert all(n.name.startswith("rnn/") for n in nodes)
    assert not [n for n in nodes if n.op_type in ("LSTM", "GRU")]


# -- the unrolled graph against the node, under the reference ---------------------------------
def _variants():
    for op, direction, layout, bias, initial in itertools.product(
            ("LSTM", "GRU", "RNN"), ("forward", "reverse", "bidirectional"), (0, 1), (False, True),
            (False, True)):
        lbrs = (0, 1) if op == "GRU" else (0,)
        for lbr in lbrs:
            extra = {"linear_before_reset": lbr} if op == "GRU" else {}
            yield dict(op=op, direction=direction, layout=layout, bias=bias, initial=initial,
                       seed=len(extra) + layout, **extra)
    # every output subset, weights and states as graph inputs, older opsets (Split's sizes
    # as an attribute before 13; no layout before 14), one step, batch 1
    for op in ("LSTM", "GRU", "RNN"):
        for k in range(1, len(OUTPUTS[op]) + 1):
            for outputs in itertools.combinations(OUTPUTS[op], k):
                yield dict(op=op, outputs=outputs, direction="bidirectional")
        yield dict(op=op, graph_inputs=("W", "R", "B", "initial_h", "initial_c"), layout=1)
        yield dict(op=op, opset=7, direction="bidirectional")
        yield dict(op=op, opset=11, direction="reverse")
        yield dict(op=op, opset=14, layout=1, direction="bidirectional")
        yield dict(op=op, seq=1, batch=1, hidden=5, size=1)


VARIANTS = list(_variants())


@pytest.mark.parametrize("params", VARIANTS,
                         ids=["-".join(f"{k}={v}" for k, v in p.items()) for p in VARIANTS])
def test_unrolled_graph_computes_the_node(params):
    model, feeds = _model(**params)
    unrolled = unroll_recurrent(model)
    onnx.checker.check_model(unrolled)
    assert [o.name for o in unrolled.graph.output] == [o.name for o in model.graph.output]
    _assert_close(_reference(unrolled, feeds), _reference(model, feeds))


_ACTIVATIONS = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0),
                "sigmoid": lambda v: 1 / (1 + np.exp(-v))}


def _numpy_rnn(feeds: dict, model: onnx.ModelProto, activations: list[str]) -> list[np.ndarray]:
    """ONNX RNN with layout 0, by its specification's equation ``H_t = f(X_t W^T + H_{t-1}
    R^T + Wb + Rb)`` in float64 numpy: the reference for the activations onnx.reference's RNN
    lacks (it has Tanh and Affine only)."""
    values = {**{t.name: numpy_helper.to_array(t) for t in model.graph.initializer}, **feeds}
    x, w, r = (values[k].astype(np.float64) for k in ("X", "W", "R"))
    dirs, hid = w.shape[0], r.shape[2]
    seq, batch = x.shape[:2]
    direction = next(helper.get_attribute_value(a) for a in model.graph.node[0].attribute
                     if a.name == "direction").decode()
    y = np.zeros((seq, dirs, batch, hid))
    last = []
    for d in range(dirs):
        f = _ACTIVATIONS[activations[d].lower()]
        bias = values["B"][d].reshape(2, hid).sum(axis=0) if "B" in values else 0
        h = values["initial_h"][d] if "initial_h" in values else np.zeros((batch, hid))
        backwards = direction == "reverse" or d == 1
        for t in reversed(range(seq)) if backwards else range(seq):
            h = y[t, d] = f(x[t] @ w[d].T + h @ r[d].T + bias)
        last.append(h)
    return [y.astype(np.float32), np.stack(last).astype(np.float32)]


@pytest.mark.parametrize("direction, activations, initial", [
    # nn.RNN(nonlinearity="relu", bidirectional=True) as the TorchScript exporter writes it
    ("bidirectional", ["Relu", "Relu"], False),
    ("bidirectional", ["Relu", "Sigmoid"], True),
    ("reverse", ["relu"], True),  # any case, as ONNX reads activation names
])
def test_rnn_activations_on_the_chip(direction, activations, initial):
    model, feeds = _model("RNN", direction=direction, activations=activations, initial=initial)
    want = _numpy_rnn(feeds, model, activations)
    _assert_close(_reference(unroll_recurrent(model), feeds), want)
    got, report = _on_chip(model, feeds)
    _assert_close(got, want)
    _all_on_chip(report)


def test_zero_peepholes_states_and_full_sequence_lens_are_dropped():
    """A constant zero P is no peephole, constant zero initial states are absent ones (the
    first step has no product with R) and a constant sequence_lens of the full length changes
    nothing; the result is the node's."""
    seq = 3
    model, feeds = _model("LSTM", seq=seq, batch=2, direction="bidirectional")
    node = model.graph.node[0]
    node.input[4] = "seq_lens"
    node.input.append("P")
    for tensor in model.graph.initializer:
        if tensor.name.startswith("initial_"):
            tensor.CopyFrom(numpy_helper.from_array(np.zeros((2, 2, 3), np.float32), tensor.name))
    model.graph.initializer.extend([
        numpy_helper.from_array(np.array([seq, seq], np.int32), "seq_lens"),
        numpy_helper.from_array(np.zeros((2, 9), np.float32), "P")])
    unrolled = unroll_recurrent(model)
    assert len([n for n in unrolled.graph.node if n.op_type == "MatMul"]) == 1 + 2 * (seq - 1)
    _assert_close(_reference(unrolled, feeds), _reference(model, feeds))


def test_hidden_size_from_r():
    """hidden_size is optional: R's shape [D, G*H, H] gives it."""
    model, feeds = _model("LSTM", hidden=4, direction="bidirectional")
    attrs = model.graph.node[0].attribute
    attrs.remove(next(a for a in attrs if a.name == "hidden_size"))
    _assert_close(_reference(unroll_recurrent(model), feeds), _reference(model, feeds))


def test_symbolic_batch_stays_symbolic():
    """The unrolled graph reshapes with -1 for the batch, so it runs any batch."""
    model, _ = _model("GRU", batch=2, direction="bidirectional", initial=False)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "N"
    unrolled = unroll_recurrent(model)
    feeds = {"X": np.random.default_rng(1).standard_normal((3, 5, 4)).astype(np.float32)}
    _assert_close(_reference(unrolled, feeds), _reference(model, feeds))


def test_loader_options():
    """Without constant folding the seq length comes from shape_dict; with the weights kept
    as parameters they are inputs of the import."""
    model, feeds = _model("LSTM", seq_dim="S")
    with pytest.raises(tvm_icca.ModelImportError, match="symbolic dimensions"):
        tvm_icca.load_onnx(model)
    shapes = {"X": list(feeds["X"].shape)}
    mod = tvm_icca.load_onnx(model, shapes, fold_constants=False)
    assert "LSTM" not in [str(t) for t in mod.attrs["icca.onnx_op_types"]]
    kept = tvm_icca.load_onnx(model, shapes, keep_params_in_input=True)
    assert len(kept["main"].params) == 1 + len(model.graph.initializer)
    assert [n.op_type for n in model.graph.node] == ["LSTM"]  # the caller's model unchanged


# -- refusals -------------------------------------------------------------------------------
REFUSALS = {
    "clip": (dict(op="LSTM", clip=3.0), "attribute clip=3"),
    "activations": (dict(op="GRU", activations=["Relu", "Tanh"]),
                    r"attribute activations=\['Relu', 'Tanh'\]"),
    "rnn_activation": (dict(op="RNN", activations=["Softsign"]),
                       r"attribute activations=\['Softsign'\] is not supported: only "
                       "Tanh/Relu/Sigmoid per direction is"),
    "input_forget": (dict(op="LSTM", input_forget=1), "attribute input_forget=1"),
    "peepholes": ("P", "input P 'P' \\(peephole weights\\)"),
    "sequence_lens_varying": ("varying", r"input sequence_lens 'lens' = \[3, 2\] varies"),
    "sequence_lens_input": ("lens_input", "input sequence_lens 'lens' is not a constant"),
    "symbolic_seq": (dict(op="GRU", seq_dim="S"), "symbolic sequence length"),
    "old_opset": (dict(op="GRU", opset=6), "opset 6 is older than GRU-7"),
}


def _refused_model(how) -> onnx.ModelProto:
    if isinstance(how, dict):
        return _model(**how)[0]
    model, _ = _model("LSTM", seq=3, batch=2, initial=False)
    node = model.graph.node[0]
    node.input.extend(["", ""])
    if how == "P":
        node.input.extend(["", "P"])
        model.graph.input.append(helper.make_tensor_value_info("P", TensorProto.FLOAT, [1, 9]))
        return model
    node.input[4] = "lens"
    if how == "varying":
        model.graph.initializer.append(numpy_helper.from_array(np.array([3, 2], np.int32), "lens"))
    else:
        model.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [2]))
    return model


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusal_names_what(name):
    how, words = REFUSALS[name]
    model = _refused_model(how)
    with pytest.raises(tvm_icca.ModelImportError,
                       match=f"^node 'rnn' \\((LSTM|GRU|RNN)\\) cannot be unrolled: .*{words}"):
        unroll_recurrent(model)
    # through the loader: the model's label first, never a TVM traceback
    with pytest.raises(tvm_icca.ModelImportError,
                       match=f"^cannot import the given ONNX model: node 'rnn' .*{words}"):
        tvm_icca.load_onnx(model, allow_symbolic=True)
