"""tvm_icca.lower.te_to_expr: Relax composite -> TVM's TE -> TensorExpr (T10 §4.2, §5).

The TE capture itself is tested in test_te_capture.py, the template-kind rules on hand-built
expressions in test_schedule_kinds.py.

Two kinds of checks: the extracted structure (axes, extents, reduce flags, access maps with
compound conv indices) and the values, by evaluating each TensorExpr with a small numpy
evaluator written here (independent of the device's own evaluator) against numpy references.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402
from tvm.relax.dpl import is_op, wildcard  # noqa: E402
from tvm.relax.transform import FuseOpsByPattern  # noqa: E402

from runtime_sim.contract.errors import (  # noqa: E402
    IccaError,
    UnsupportedDtypeError,
    UnsupportedOperatorError,
)
from runtime_sim.contract.expr import AffineIndex, TensorExpr, walk_expr  # noqa: E402
from runtime_sim.contract.layout import OpLayout  # noqa: E402
from runtime_sim.contract.plan import ExecutionPlan  # noqa: E402
from runtime_sim.contract.plan_rules import pinned_axes  # noqa: E402
from tvm_icca.lower.te_to_expr import extract_op, tensor_expr_of  # noqa: E402
from tvm_icca.testing.relax_functions import relax_function  # noqa: E402

op = relax.op
RNG = np.random.default_rng(0)


# -- helpers ------------------------------------------------------------------------------------


rfunc = relax_function


def idx(*terms, offset=0) -> AffineIndex:
    return AffineIndex(tuple(terms), offset)


def ax(name: str) -> AffineIndex:
    return AffineIndex.of_axis(name)


def access(expr: TensorExpr, i: int) -> tuple[AffineIndex, ...]:
    return expr.inputs[i].indices


def ops_in(node) -> set[str]:
    return {n["op"] for n in walk_expr(node)} if node else set()


# -- reference evaluator (single core, whole tensors) --------------------------------------------

_UNARY = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": np.vectorize(math.erf, otypes=[np.float64]), "abs": np.abs, "not": np.logical_not,
    "floor": np.floor, "ceil": np.ceil, "round": np.round,
}
_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum, "pow": np.power, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "and": np.logical_and, "or": np.logical_or,
}
_COMBINE = {"sum": np.sum, "max": np.max, "min": np.min}


def reference_eval(expr: TensorExpr, inputs: list[np.ndarray]) -> np.ndarray:
    """Evaluate ``expr`` by brute force: one array dimension per axis in scope.

    Loads out of a tensor's bounds read zero (the device's zero fill, which stands for
    padding); ``reduce`` nodes open new dimensions for their local axes and fold them.
    """
    extent = {a.name: a.extent for a in expr.axes + expr.local_axes}

    def ev(node, dims, result):
        kind = node["op"]
        if kind == "const":
            return np.full([1] * len(dims), node["value"], dtype=np.float64)
        if kind == "result":
            return result
        if kind == "axis":
            shape = [1] * len(dims)
            shape[dims.index(node["axis"])] = extent[node["axis"]]
            return np.arange(extent[node["axis"]]).reshape(shape)
        if kind == "load":
            tensor = inputs[node["input"]]
            full = [extent[d] for d in dims]
            where, valid = [], np.ones(full, bool)
            for d, i in enumerate(node["index"]):
                pos = np.full([1] * len(dims), i["offset"], np.int64)
                for a, c in i["terms"]:
                    shape = [1] * len(dims)
                    shape[dims.index(a)] = extent[a]
                    pos = pos + c * np.arange(extent[a]).reshape(shape)
                pos = np.broadcast_to(pos, full)
                valid &= (pos >= 0) & (pos < tensor.shape[d])
                where.append(np.clip(pos, 0, tensor.shape[d] - 1))
            return np.where(valid, tensor[tuple(where)].astype(np.float64), 0.0)
        if kind == "reduce":
            inner = dims + list(node["axes"])
            v = np.broadcast_to(ev(node["args"][0], inner, result), [extent[d] for d in inner])
            return _COMBINE[node["combiner"]](v, axis=tuple(range(len(dims), len(inner))))
        args = [ev(a, dims, result) for a in node.get("args", ())]
        if kind == "select":
            return np.where(args[0].astype(bool), args[1], args[2])
        if kind == "cast":
            return args[0].astype(node["dtype"])
        if kind in _UNARY:
            return _UNARY[kind](args[0])
        return _BINARY[kind](*args)

    top = [a.name for a in expr.axes]
    spatial = [a.name for a in expr.axes if not a.reduce]
    value = np.broadcast_to(ev(expr.body, top, None), [extent[d] for d in top])
    red = tuple(i for i, a in enumerate(expr.axes) if a.reduce)
    value = _COMBINE[expr.combiner](value, axis=red) if red else value
    if expr.epilogue is not None:
        value = np.broadcast_to(ev(expr.epilogue, spatial, value), [extent[d] for d in spatial])
    # a merged output dim lists its axes outermost first (row-major: a reshape's merge, a
    # grouped conv's g*k + f)
    order = [a for i in expr.output.indices for a, _ in sorted(i.terms, key=lambda t: -t[1])]
    return np.asarray(value).transpose([spatial.index(a) for a in order]).reshape(expr.output.shape)


def run(func: relax.Function, arrays: list[np.ndarray]) -> np.ndarray:
    ext = extract_op(func)
    inputs = [arrays[p] if p is not None else ext.constants[i]
              for i, p in enumerate(ext.param_of_input)]
    return reference_eval(ext.expr, inputs)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


# -- numpy references ---------------------------------------------------------------------------


def np_conv2d(x, w, stride, padding, dilation):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dilation: i * dilation + stride * (oh - 1) + 1: stride,
                       j * dilation: j * dilation + stride * (ow - 1) + 1: stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


def np_group_conv2d(x, w, stride, padding, groups):
    """Grouped convolution as ``groups`` independent convolutions over channel slices."""
    cg, fg = x.shape[1] // groups, w.shape[0] // groups
    return np.concatenate([np_conv2d(x[:, g * cg:(g + 1) * cg], w[g * fg:(g + 1) * fg], stride, padding, 1)
                           for g in range(groups)], axis=1)


def np_pool2d(x, k, stride, pad, reduce, count_include_pad=True):
    """Max / average pooling written from the ONNX operator definitions (-inf / 0 padding)."""
    n, c, h, w = x.shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    fill = -np.inf if reduce == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    ones = np.pad(np.ones((h, w)), pad)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * stride:i * stride + k, j * stride:j * stride + k]
            if reduce == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                count = k * k if count_include_pad else \
                    ones[i * stride:i * stride + k, j * stride:j * stride + k].sum()
                out[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return out


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def np_gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


# -- structure ----------------------------------------------------------------------------------


def test_matmul_2d_structure():
    e = tensor_expr_of(rfunc([(4, 8), (8, 5)], op.matmul))
    assert e.kind == "matmul"
    assert [(a.name, a.extent, a.reduce) for a in e.axes] == [
        ("i0", 4, False), ("i1", 5, False), ("k", 8, True)]
    assert access(e, 0) == (ax("i0"), ax("k"))
    assert access(e, 1) == (ax("k"), ax("i1"))
    assert e.output.indices == (ax("i0"), ax("i1")) and e.output.shape == (4, 5)
    assert e.epilogue is None and e.local_axes == ()
    assert e.body == {"op": "mul", "args": [
        {"op": "load", "input": 0, "index": [ax("i0").to_dict(), ax("k").to_dict()]},
        {"op": "load", "input": 1, "index": [ax("k").to_dict(), ax("i1").to_dict()]}]}


def test_transposed_operand_is_indexed_n_k():
    # Params in the order FuseOpsByPattern produces them (w first): the mapping says so.
    f = rfunc([(5, 8), (4, 8)], lambda w, x: op.matmul(x, op.permute_dims(w)), names=["w", "x"])
    ext = extract_op(f)
    e = ext.expr
    assert ext.param_of_input == (1, 0)
    assert [t.name for t in e.inputs] == ["x", "w"]
    assert access(e, 1) == (ax("i1"), ax("k"))  # B read as [n, k]: the transpose is inlined
    assert e.inputs[1].shape == (5, 8)


def test_batched_matmul_structure():
    e = tensor_expr_of(rfunc([(3, 4, 8), (3, 8, 5)], op.matmul))
    assert [(a.name, a.extent, a.reduce) for a in e.axes] == [
        ("i0", 3, False), ("i1", 4, False), ("i2", 5, False), ("k", 8, True)]
    assert access(e, 0) == (ax("i0"), ax("i1"), ax("k"))
    assert access(e, 1) == (ax("i0"), ax("k"), ax("i2"))
    # A batch-broadcast weight is read without the batch axis.
    e = tensor_expr_of(rfunc([(3, 4, 8), (8, 5)], op.matmul))
    assert access(e, 1) == (ax("k"), ax("i2"))


def _dense_bias_relu_module():
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((5, 8), "float32"),
                 b: R.Tensor((5,), "float32")):
            with R.dataflow():
                wt = R.permute_dims(w)
                y = R.matmul(x, wt)
                z = R.add(y, b)
                r = R.nn.relu(z)
                R.output(r)
            return r

    x, w, b = wildcard(), wildcard(), wildcard()
    dense = is_op("relax.matmul")(x, is_op("relax.permute_dims")(w))
    pat = is_op("relax.nn.relu")(is_op("relax.add")(dense, b))
    return Mod, pat


@pytest.mark.parametrize("annotate_codegen", [False, True])
def test_dense_bias_relu_composite_has_epilogue(annotate_codegen):
    mod, pat = _dense_bias_relu_module()
    mod = FuseOpsByPattern([("icca.dense_bias_relu", pat)], bind_constants=False,
                           annotate_codegen=annotate_codegen)(mod)
    funcs = [f for gv, f in mod.functions.items() if gv.name_hint != "main"]
    assert len(funcs) == 1
    func = funcs[0]  # the composite itself, or the codegen wrapper that calls it
    ext = extract_op(func, name="y")
    e = ext.expr
    names = [p.name for p in func.params]
    assert [names[p] for p in ext.param_of_input] == ["x", "w", "b"]
    assert e.kind == "matmul" and e.reduce_axes == ("k",)
    assert access(e, 1) == (ax("i1"), ax("k"))
    assert e.epilogue_inputs == (2,) and access(e, 2) == (ax("i1"),)
    assert ops_in(e.body) == {"mul", "load"}
    assert ops_in(e.epilogue) == {"max", "add", "result", "load", "const"}
    assert e.output.name == "y"
    x, w, b = rand(4, 8), rand(5, 8), rand(5)
    args = {"x": x, "w": w, "b": b}
    got = reference_eval(e, [args[names[p]] for p in ext.param_of_input])
    np.testing.assert_allclose(got, np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "stride,padding,dilation,h_index",
    [
        (2, 0, 1, idx(("yy", 2), ("ry", 1))),
        (1, 2, 2, idx(("yy", 1), ("ry", 2), offset=-2)),
        (2, 1, 2, idx(("yy", 2), ("ry", 2), offset=-1)),
    ],
)
def test_conv2d_compound_indices(stride, padding, dilation, h_index):
    f = rfunc([(2, 3, 9, 9), (4, 3, 3, 3)],
              lambda x, w: op.nn.conv2d(x, w, strides=stride, padding=padding, dilation=dilation))
    e = tensor_expr_of(f)
    assert e.kind == "conv2d"
    assert [a.name for a in e.axes] == ["nn", "ff", "yy", "xx", "rc", "ry", "rx"]
    assert e.reduce_axes == ("rc", "ry", "rx")
    w_index = AffineIndex(tuple((a.replace("y", "x"), c) for a, c in h_index.terms), h_index.offset)
    assert access(e, 0) == (ax("nn"), ax("rc"), h_index, w_index)
    assert access(e, 1) == (ax("ff"), ax("rc"), ax("ry"), ax("rx"))
    # The pad condition was recognized as the bounds check of the read and dropped.
    assert ops_in(e.body) == {"mul", "load"}
    x, w = rand(2, 3, 9, 9), rand(4, 3, 3, 3)
    np.testing.assert_allclose(reference_eval(e, [x, w]), np_conv2d(x, w, stride, padding, dilation),
                               rtol=1e-5, atol=1e-5)


def test_broadcast_bias_indices():
    e = tensor_expr_of(rfunc([(2, 3, 4), (4,)], op.add))
    assert access(e, 1) == (ax("ax2"),)
    e = tensor_expr_of(rfunc([(2, 3, 4), (3, 1)], op.add))
    assert access(e, 1) == (ax("ax1"), idx())  # the broadcast unit dimension is read at 0


def test_softmax_structure_and_pinning():
    e = tensor_expr_of(rfunc([(3, 7)], lambda x: op.nn.softmax(x)))
    assert e.kind == "softmax"
    assert [(a.name, a.reduce) for a in e.axes] == [("i0", False), ("i1", False)]
    assert [(a.name, a.extent) for a in e.local_axes] == [("k", 7), ("k_1", 7)]
    reduces = [n for n in walk_expr(e.body) if n["op"] == "reduce"]
    assert {n["combiner"] for n in reduces} == {"max", "sum"}
    assert access(e, 0) == (ax("i0"), ax("i1"))
    assert pinned_axes(e) == {"i1"}  # the row is whole on every core


def test_layer_norm_and_mean_structure():
    e = tensor_expr_of(rfunc([(3, 6), (6,), (6,)],
                             lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-1])))
    assert e.kind == "layer_norm" and e.reduce_axes == () and e.epilogue is None
    assert len(e.local_axes) == 2 and [access(e, i) for i in (1, 2)] == [(ax("ax1"),)] * 2
    e = tensor_expr_of(rfunc([(3, 6)], lambda x: op.mean(x, axis=[1])))
    assert e.kind == "reduce"
    assert [(a.name, a.extent, a.reduce) for a in e.axes] == [("ax0", 3, False), ("k1", 6, True)]
    assert e.epilogue == {"op": "div", "args": [{"op": "result"}, {"op": "const", "value": 6.0}]}


def test_max_reduction_is_core_local():
    e = tensor_expr_of(rfunc([(3, 6)], lambda x: op.max(x, axis=[1])))
    assert e.kind == "reduce" and e.reduce_axes == ()
    assert e.body["op"] == "reduce" and e.body["combiner"] == "max"


def test_json_round_trip_and_layout():
    e = tensor_expr_of(rfunc([(4, 8), (8, 6)], op.matmul))
    again = TensorExpr.from_dict(json.loads(json.dumps(e.to_dict())))
    assert again == e
    # A Cannon-style plan on the extracted expression is valid for the device layout.
    plan = ExecutionPlan({"i0": 2, "i1": 2}, ({"k": 2}, {"k": 2}, {}))
    OpLayout(e, plan).validate()
    conv = tensor_expr_of(rfunc([(1, 2, 8, 8), (4, 2, 3, 3)],
                                lambda x, w: op.nn.conv2d(x, w, strides=2, padding=1)))
    OpLayout(conv, ExecutionPlan({"yy": 2, "ff": 2}, tuple({} for _ in conv.tensors))).validate()


# -- values -------------------------------------------------------------------------------------

VALUE_CASES = [
    ("matmul", [(4, 8), (8, 5)], op.matmul, lambda a, b: a @ b),
    ("matmul_batched", [(2, 3, 8), (2, 8, 5)], op.matmul, lambda a, b: a @ b),
    ("matmul_bcast", [(2, 3, 8), (8, 5)], op.matmul, lambda a, b: a @ b),
    ("matmul_transposed", [(4, 8), (5, 8)], lambda a, b: op.matmul(a, op.permute_dims(b)),
     lambda a, b: a @ b.T),
    ("dense_bias_relu", [(4, 8), (5, 8), (5,)],
     lambda x, w, b: op.nn.relu(op.add(op.matmul(x, op.permute_dims(w)), b)),
     lambda x, w, b: np.maximum(x @ w.T + b, 0)),
    ("add_bcast", [(2, 3, 4), (4,)], op.add, np.add),
    ("sub_bcast", [(2, 3, 4), (3, 1)], op.subtract, np.subtract),
    ("mul_bcast", [(2, 1, 4), (3, 4)], op.multiply, np.multiply),
    ("div", [(2, 3), (2, 3)], op.divide, np.divide),
    ("relu", [(3, 5)], op.nn.relu, lambda x: np.maximum(x, 0)),
    ("gelu", [(3, 5)], op.nn.gelu, np_gelu),
    ("tanh", [(3, 5)], op.tanh, np.tanh),
    ("sigmoid", [(3, 5)], op.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    ("exp", [(3, 5)], op.exp, np.exp),
    ("softmax", [(3, 7)], lambda x: op.nn.softmax(x), np_softmax),
    ("softmax_axis0", [(4, 3)], lambda x: op.nn.softmax(x, axis=0), lambda x: np_softmax(x, 0)),
    ("layer_norm", [(3, 6), (6,), (6,)], lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-1]),
     np_layer_norm),
    ("sum_axis", [(3, 6)], lambda x: op.sum(x, axis=[1]), lambda x: x.sum(1)),
    ("sum_keepdims", [(3, 6)], lambda x: op.sum(x, axis=[0], keepdims=True),
     lambda x: x.sum(0, keepdims=True)),
    ("sum_all", [(3, 6)], lambda x: op.sum(x), lambda x: x.sum()),
    ("mean_axis", [(3, 6)], lambda x: op.mean(x, axis=[1]), lambda x: x.mean(1)),
    ("max_axis", [(3, 6)], lambda x: op.max(x, axis=[1]), lambda x: x.max(1)),
    ("conv2d_s2_p1_d2", [(1, 3, 9, 9), (4, 3, 3, 3)],
     lambda x, w: op.nn.conv2d(x, w, strides=2, padding=1, dilation=2),
     lambda x, w: np_conv2d(x, w, 2, 1, 2)),
    ("pad_nonzero_value", [(2, 3)],
     lambda x: op.nn.pad(x, pad_width=[0, 0, 1, 2], pad_value=1.5),
     lambda x: np.pad(x, ((0, 0), (1, 2)), constant_values=1.5)),
    # Beyond the brief's list: whatever else TVM's TE gives for common ops must convert too.
    ("log_softmax", [(3, 7)], lambda x: op.nn.log_softmax(x), lambda x: np.log(np_softmax(x))),
    ("rms_norm", [(3, 6), (6,)], lambda x, g: op.nn.rms_norm(x, g, axes=[-1]),
     lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g),
    ("variance", [(3, 6)], lambda x: op.variance(x, axis=[1]), lambda x: x.var(1)),
    ("silu", [(3, 5)], op.nn.silu, lambda x: x / (1 + np.exp(-x))),
    ("gelu_tanh", [(3, 5)], op.nn.gelu_tanh,
     lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    ("clip", [(3, 5)], lambda x: op.clip(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5)),
    ("power", [(3, 5), (3, 5)], lambda a, b: op.power(op.exp(a), b), lambda a, b: np.exp(a) ** b),
    ("where", [(3, 5), (3, 5)], lambda a, b: op.where(op.greater(a, b), a, b), np.maximum),
    ("concat", [(2, 4), (3, 4)], lambda a, b: op.concat([a, b], axis=0),
     lambda a, b: np.concatenate([a, b], 0)),
    ("strided_slice", [(4, 7)],
     lambda x: op.strided_slice(x, axes=[1], begin=[1], end=[6], strides=[2]), lambda x: x[:, 1:6:2]),
    ("tril", [(4, 4)], lambda x: op.tril(x), np.tril),
    ("einsum", [(4, 6), (6, 3)], lambda a, b: op.einsum([a, b], "ij,jk->ik"), lambda a, b: a @ b),
    ("avg_pool2d", [(1, 2, 6, 6)], lambda x: op.nn.avg_pool2d(x, pool_size=2, strides=2),
     lambda x: x.reshape(1, 2, 3, 2, 3, 2).mean((3, 5))),
    ("max_pool2d_pad", [(1, 2, 5, 5)],
     lambda x: op.nn.max_pool2d(x, pool_size=3, strides=1, padding=1),
     lambda x: np.max([np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
                       [:, :, i:i + 5, j:j + 5] for i in range(3) for j in range(3)], axis=0)),
    ("conv2d_nhwc", [(1, 6, 6, 3), (3, 3, 3, 4)],
     lambda x, w: op.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="HWIO"),
     lambda x, w: np_conv2d(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), 1, 1, 1)
     .transpose(0, 2, 3, 1)),
    ("conv2d_bias_relu", [(1, 3, 6, 6), (4, 3, 3, 3), (1, 4, 1, 1)],
     lambda x, w, b: op.nn.relu(op.add(op.nn.conv2d(x, w, padding=1), b)),
     lambda x, w, b: np.maximum(np_conv2d(x, w, 1, 1, 1) + b, 0)),
    ("group_conv2d", [(2, 8, 7, 7), (6, 4, 3, 3)],
     lambda x, w: op.nn.conv2d(x, w, strides=2, padding=1, groups=2),
     lambda x, w: np_group_conv2d(x, w, 2, 1, 2)),
    ("depthwise_conv2d", [(1, 6, 7, 7), (6, 1, 3, 3)],
     lambda x, w: op.nn.conv2d(x, w, strides=1, padding=1, groups=6),
     lambda x, w: np_group_conv2d(x, w, 1, 1, 6)),
    ("group_conv2d_bias_relu", [(1, 6, 5, 5), (9, 2, 3, 3), (1, 9, 1, 1)],
     lambda x, w, b: op.nn.relu(op.add(op.nn.conv2d(x, w, padding=1, groups=3), b)),
     lambda x, w, b: np.maximum(np_group_conv2d(x, w, 1, 1, 3) + b, 0)),
    ("max_pool2d_s2", [(1, 3, 7, 7)],
     lambda x: op.nn.max_pool2d(x, pool_size=3, strides=2, padding=1),
     lambda x: np_pool2d(x, 3, 2, 1, "max")),
    ("avg_pool2d_exclude_pad", [(1, 3, 7, 7)],
     lambda x: op.nn.avg_pool2d(x, pool_size=3, strides=2, padding=1, count_include_pad=False),
     lambda x: np_pool2d(x, 3, 2, 1, "avg", count_include_pad=False)),
    ("avg_pool2d_include_pad", [(1, 3, 7, 7)],
     lambda x: op.nn.avg_pool2d(x, pool_size=3, strides=2, padding=1, count_include_pad=True),
     lambda x: np_pool2d(x, 3, 2, 1, "avg", count_include_pad=True)),
    ("avg_pool2d_dilated_ceil", [(1, 2, 6, 6)],  # the in-bounds count uses integer truncdiv
     lambda x: op.nn.avg_pool2d(x, pool_size=2, strides=1, dilation=2, ceil_mode=True),
     lambda x: np.stack([x[:, :, i:i + 3:2, j:j + 3:2].mean((2, 3)) for i in range(4) for j in range(4)],
                        -1).reshape(1, 2, 4, 4)),
    ("adaptive_avg_pool2d", [(2, 3, 5, 5)], lambda x: op.nn.adaptive_avg_pool2d(x, output_size=1),
     lambda x: x.mean(axis=(2, 3), keepdims=True)),
    ("matmul_gelu", [(4, 8), (8, 5)], lambda a, b: op.nn.gelu(op.matmul(a, b)),
     lambda a, b: np_gelu(a @ b)),
    ("matmul_softmax", [(4, 8), (8, 5)], lambda a, b: op.nn.softmax(op.matmul(a, b)),
     lambda a, b: np_softmax(a @ b)),
    # view ops (tvm_icca.ops.views): copies whose index maps re-lay the data out
    ("reshape_split", [(2, 3, 20)], lambda x: op.reshape(x, (2, 3, 4, 5)), lambda x: x.reshape(2, 3, 4, 5)),
    ("reshape_merge", [(2, 3, 4, 5)], lambda x: op.reshape(x, (2, 3, 20)), lambda x: x.reshape(2, 3, 20)),
    ("reshape_split_merge", [(4, 8)], lambda x: op.reshape(x, (8, 4)), lambda x: x.reshape(8, 4)),
    ("flatten", [(2, 3, 4)], op.flatten, lambda x: x.reshape(-1)),
    ("permute_dims_any", [(2, 3, 4, 5)], lambda x: op.permute_dims(x, [2, 0, 3, 1]),
     lambda x: x.transpose(2, 0, 3, 1)),
    ("expand_dims", [(3, 4)], lambda x: op.expand_dims(x, [0, 2]), lambda x: x[None, :, None]),
    ("squeeze", [(3, 1, 4, 1)], lambda x: op.squeeze(x, [1, 3]), lambda x: x[:, 0, :, 0]),
    ("broadcast_to", [(3, 1)], lambda x: op.broadcast_to(x, (2, 3, 4)),
     lambda x: np.broadcast_to(x, (2, 3, 4))),
]


@pytest.mark.parametrize("name,shapes,build,ref", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_values_match_numpy(name, shapes, build, ref):
    arrays = [rand(*s) for s in shapes]
    got = run(rfunc(shapes, build), arrays)
    want = ref(*[a.astype(np.float64) for a in arrays])
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


EXPECTED_KINDS = {
    "matmul": "matmul", "matmul_batched": "matmul", "matmul_transposed": "matmul",
    "dense_bias_relu": "matmul", "matmul_gelu": "matmul", "einsum": "matmul",
    "conv2d_s2_p1_d2": "conv2d", "conv2d_nhwc": "conv2d", "conv2d_bias_relu": "conv2d",
    "softmax": "softmax", "log_softmax": "softmax", "matmul_softmax": "softmax",
    "layer_norm": "layer_norm", "rms_norm": "layer_norm",
    # a variance's statistics are core-local rows costed with hoisting, like a layer norm's
    "sum_axis": "reduce", "mean_axis": "reduce", "max_axis": "reduce", "variance": "layer_norm",
    "avg_pool2d": "reduce", "max_pool2d_pad": "reduce", "max_pool2d_s2": "reduce",
    "adaptive_avg_pool2d": "reduce", "group_conv2d": "conv2d", "group_conv2d_bias_relu": "conv2d",
    "depthwise_conv2d": "depthwise_conv2d",
    "add_bcast": "elementwise", "gelu": "elementwise", "where": "elementwise",
    "concat": "elementwise", "pad_nonzero_value": "elementwise",
    "reshape_merge": "elementwise", "permute_dims_any": "elementwise",
}
CASES_BY_NAME = {c[0]: c for c in VALUE_CASES}


@pytest.mark.parametrize("name,kind", sorted(EXPECTED_KINDS.items()))
def test_kind(name, kind):
    _, shapes, build, _ = CASES_BY_NAME[name]
    assert tensor_expr_of(rfunc(shapes, build)).kind == kind


def test_fused_epilogues():
    # conv2d + bias + relu: the conv sum is top level, the [1, F, 1, 1] bias an epilogue input.
    e = tensor_expr_of(rfunc(*CASES_BY_NAME["conv2d_bias_relu"][1:3]))
    assert e.reduce_axes == ("rc", "ry", "rx") and e.epilogue_inputs == (2,)
    assert access(e, 2) == (ax("nn"), ax("ff"), idx(), idx())
    # gelu reads the matmul twice, both times at the identity index.
    e = tensor_expr_of(rfunc(*CASES_BY_NAME["matmul_gelu"][1:3]))
    assert e.reduce_axes == ("k",) and "erf" in ops_in(e.epilogue)
    assert sum(n["op"] == "result" for n in walk_expr(e.epilogue)) == 2
    # A matmul feeding a softmax is needed at every column of a row: it stays core-local.
    e = tensor_expr_of(rfunc(*CASES_BY_NAME["matmul_softmax"][1:3]))
    assert e.reduce_axes == () and e.epilogue is None
    assert {n["combiner"] for n in walk_expr(e.body) if n["op"] == "reduce"} == {"sum", "max"}


def test_float16_gelu_keeps_tvm_casts():
    f = rfunc([(3, 5)], op.nn.gelu, dtype="float16")
    e = tensor_expr_of(f)
    assert e.inputs[0].dtype == "float16" and e.output.dtype == "float16"
    assert {n["dtype"] for n in walk_expr(e.body) if n["op"] == "cast"} == {"float32", "float16"}
    x = rand(3, 5, dtype="float16")
    np.testing.assert_allclose(reference_eval(e, [x]), np_gelu(x.astype(np.float64)),
                               rtol=2e-3, atol=2e-3)


def test_scalar_constant_is_inlined():
    f = rfunc([(2, 3)], lambda x: op.multiply(x, relax.const(np.full((1,), 2.5, "float32"))))
    ext = extract_op(f)
    assert len(ext.expr.inputs) == 1 and ext.param_of_input == (0,)
    x = rand(2, 3)
    np.testing.assert_allclose(reference_eval(ext.expr, [x]), 2.5 * x, rtol=1e-6)


def test_tensor_constant_becomes_input():
    c = rand(3)
    ext = extract_op(rfunc([(2, 3)], lambda x: op.add(x, relax.const(c))))
    assert ext.param_of_input == (0, None)
    np.testing.assert_array_equal(ext.constants[1], c)
    x = rand(2, 3)
    np.testing.assert_allclose(reference_eval(ext.expr, [x, ext.constants[1]]), x + c, rtol=1e-6)


# -- refusals -----------------------------------------------------------------------------------


def test_reshape_that_straddles_rows_is_not_affine():
    # [2, 6] -> [3, 4]: output row 1 holds the end of input row 0 and the start of row 1
    with pytest.raises(UnsupportedOperatorError, match="not affine"):
        tensor_expr_of(rfunc([(2, 6)], lambda x: op.reshape(x, (3, 4))))


def test_reshape_that_merges_dims_iterates_over_the_finer_axes():
    e = tensor_expr_of(rfunc([(2, 3, 4, 5)], lambda x: op.reshape(x, (2, 3, 20))))
    assert [(a.name, a.extent) for a in e.axes] == [("ax0", 2), ("ax1", 3), ("ax2_0", 4), ("ax2_1", 5)]
    assert access(e, 0) == (ax("ax0"), ax("ax1"), ax("ax2_0"), ax("ax2_1"))
    assert e.output.indices == (ax("ax0"), ax("ax1"), idx(("ax2_0", 5), ("ax2_1", 1)))
    assert e.merged_inner_axes == ("ax2_1",) and pinned_axes(e) == {"ax2_1"}
    split = tensor_expr_of(rfunc([(2, 3, 20)], lambda x: op.reshape(x, (2, 3, 4, 5))))
    assert access(split, 0) == (ax("ax0"), ax("ax1"), idx(("ax2", 5), ("ax3", 1)))
    assert all(i.is_simple for i in split.output.indices)


def test_reshape_inserting_unit_dims_is_affine():
    e = tensor_expr_of(rfunc([(2, 6)], lambda x: op.reshape(x, (2, 1, 6))))
    assert access(e, 0) == (ax("ax0"), ax("ax2"))


def test_unsupported_dtype():
    with pytest.raises(UnsupportedDtypeError, match="int32"):
        tensor_expr_of(rfunc([(2, 6)], op.nn.relu, dtype="int32"))
    with pytest.raises(UnsupportedDtypeError):
        tensor_expr_of(rfunc([(2, 6)], lambda x: op.argmax(x, axis=1)))


def test_product_reduction_is_refused():
    with pytest.raises(UnsupportedOperatorError, match="combiner"):
        tensor_expr_of(rfunc([(2, 6)], lambda x: op.prod(x, axis=[1])))


def test_data_dependent_index_is_refused():
    f = rfunc([(5, 4), (3,)], lambda x, i: op.take(x, op.astype(i, "int64"), axis=0))
    with pytest.raises(IccaError):
        tensor_expr_of(f)
