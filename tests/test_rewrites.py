"""Written-out activations as real exporters emit them: recognized, offloaded, and right.

Each block is an ONNX graph built with ``onnx.helper`` in the form PyTorch's exporter writes
it (MobileNetV2's ReLU6 as ``Clip`` with initializer bounds, BERT's erf GELU, GPT-2's
``gelu_new``, Llama's SwiGLU, a masked-fill attention score), compiled for ``icca`` and
compared with ``onnx.reference.ReferenceEvaluator`` and TVM's own llvm build.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import tvm
import tvm.testing
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tvm import relax, te, topi

import tvm_icca
from tvm_icca.testing.device_runs import reference_build
from tvm_icca.frontend.rewrites import (
    RecognizeActivations,
    RecognizeNorms,
    constant_matches,
    read_minmax_primfunc,
)

SQRT2 = math.sqrt(2.0)


class Graph:
    """A one-output ONNX graph under construction (float32 unless told)."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def const(self, value, dtype=np.float32) -> str:
        self.count += 1
        name = f"c{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def weight(self, *shape: int) -> str:
        return self.const(self.rng.standard_normal(shape) / math.sqrt(shape[-1 if len(shape) < 4 else 1]))

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        self.count += 1
        out = f"{op_type.lower()}{self.count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def model(self, inputs: dict[str, tuple], output: str, out_shape: tuple, opset: int = 17,
              input_types: dict[str, int] | None = None) -> onnx.ModelProto:
        types = input_types or {}
        graph = helper.make_graph(
            self.nodes, "block",
            [helper.make_tensor_value_info(k, types.get(k, TensorProto.FLOAT), list(v)) for k, v in inputs.items()],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(out_shape))],
            initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def import_rewritten(model: onnx.ModelProto) -> tvm.IRModule:
    mod = tvm_icca.load_onnx(model)
    return RecognizeActivations()(relax.transform.FoldConstant()(mod))


def ops_of(mod: tvm.IRModule) -> list[str]:
    names: list[str] = []
    relax.analysis.post_order_visit(
        mod["main"], lambda n: isinstance(n, relax.Call) and isinstance(n.op, tvm.ir.Op)
        and names.append(n.op.name))
    return names


def run_everywhere(model: onnx.ModelProto, inputs: dict[str, np.ndarray]):
    """(icca result, llvm result, onnx reference result, partition report)."""
    mod = tvm_icca.load_onnx(model)
    args = [tvm.runtime.tensor(v) for v in inputs.values()]
    icca = relax.VirtualMachine(tvm.compile(mod, target="icca"), tvm.cpu())["main"](*args).numpy()
    llvm = relax.VirtualMachine(reference_build(mod), tvm.cpu())["main"](*args).numpy()
    want = ReferenceEvaluator(model).run(None, inputs)[0]
    return icca, llvm, want, tvm_icca.partition_report(tvm_icca.partition_for_icca(mod))


def check_one_region(model: onnx.ModelProto, inputs: dict[str, np.ndarray], *composites: str,
                     atol: float = 1e-5) -> tuple[np.ndarray, dict]:
    """The ICCA build matches the ONNX reference and TVM's CPU build, all in one region
    holding ``composites``; returns the ICCA result and the partition report."""
    icca, llvm, want, report = run_everywhere(model, inputs)
    tvm.testing.assert_allclose(icca, want, rtol=1e-5, atol=atol)
    tvm.testing.assert_allclose(icca, llvm, rtol=1e-5, atol=atol)
    assert_one_region(report, *composites)
    return icca, report


def assert_one_region(report: dict, *composites: str) -> None:
    assert report["host_ops"] == {}, report["host_reasons"]
    assert len(report["regions"]) == 1, [r["composites"] for r in report["regions"]]
    for name in composites:
        assert name in report["regions"][0]["composites"], report["regions"][0]["composites"]


# -- the ops exporters write out ---------------------------------------------------------------
def erf_gelu(g: Graph, x: str, form: str) -> str:
    """GELU with erf in the orders exporters write it."""
    if form == "bert":  # torch: x * 0.5 * (1 + erf(x / sqrt 2)) as Div, Erf, Add, Mul, Mul
        e = g.op("Add", g.op("Erf", g.op("Div", x, g.const(SQRT2))), g.const(1.0))
        return g.op("Mul", g.op("Mul", x, e), g.const(0.5))
    if form == "half_first":  # (0.5 * x) * (erf(x * 1/sqrt 2) + 1)
        e = g.op("Add", g.const(1.0), g.op("Erf", g.op("Mul", g.const(1 / SQRT2), x)))
        return g.op("Mul", g.op("Mul", g.const(0.5), x), e)
    if form == "half_inner":  # x * ((1 + erf(x / sqrt 2)) * 0.5)
        e = g.op("Add", g.op("Erf", g.op("Div", x, g.const(SQRT2))), g.const(1.0))
        return g.op("Mul", x, g.op("Mul", e, g.const(0.5)))
    assert form == "div_two"  # x * (1 + erf(x / sqrt 2)) / 2
    e = g.op("Add", g.op("Erf", g.op("Div", x, g.const(SQRT2))), g.const(1.0))
    return g.op("Div", g.op("Mul", x, e), g.const(2.0))


def gelu_new(g: Graph, x: str, cubic: float = 0.044715) -> str:
    """GPT-2's gelu_new as torch exports it: Mul, Pow, Mul, Add, Mul, Tanh, Add, Mul."""
    half = g.op("Mul", x, g.const(0.5))
    inner = g.op("Add", x, g.op("Mul", g.const(cubic), g.op("Pow", x, g.const(3.0))))
    t = g.op("Tanh", g.op("Mul", g.const(math.sqrt(2 / math.pi)), inner))
    return g.op("Mul", half, g.op("Add", g.const(1.0), t))


def relu6(g: Graph, x: str, opset: int = 13) -> str:
    if opset >= 11:
        return g.op("Clip", x, g.const(0.0), g.const(6.0))
    return g.op("Clip", x, min=0.0, max=6.0)


# -- the rewrite pass ---------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [6, 13])
def test_relu6_clip_becomes_relax_clip(opset: int) -> None:
    g = Graph()
    model = g.model({"x": (2, 8)}, relu6(g, "x", opset), (2, 8), opset=opset)
    mod = import_rewritten(model)
    assert ops_of(mod) == ["relax.clip"]
    # the maximum / minimum PrimFuncs the importer made are gone with their calls
    assert [gv.name_hint for gv in mod.get_global_vars()] == ["main"]


@pytest.mark.parametrize("node", ["HardSigmoid", "HardSwish"])
def test_hard_activations_are_clip_and_elementwise(node: str) -> None:
    g = Graph()
    model = g.model({"x": (2, 8)}, g.op(node, "x"), (2, 8))
    assert "relax.clip" in ops_of(import_rewritten(model))


def test_one_sided_and_inverted_clips_are_left_alone() -> None:
    g = Graph()
    model = g.model({"x": (2, 8)}, g.op("Clip", "x", g.const(6.0), g.const(0.0)), (2, 8))
    assert "relax.clip" not in ops_of(import_rewritten(model))  # min > max is no clip
    g = Graph()
    model = g.model({"x": (2, 8)}, g.op("Clip", "x", g.const(0.0)), (2, 8))
    assert ops_of(import_rewritten(model)) == ["relax.maximum"]  # min only: a ReLU-like max


def test_minmax_primfunc_reader_accepts_only_a_scalar_max_or_min() -> None:
    x, y, s = te.placeholder((2, 3), name="x"), te.placeholder((2, 3), name="y"), te.placeholder((), name="s")
    found = read_minmax_primfunc(te.create_prim_func([x, topi.maximum(x, 0.5)]))
    assert (found.op, found.data, found.scalar) == ("relax.maximum", 0, 0.5)
    found = read_minmax_primfunc(te.create_prim_func([s, x, topi.minimum(s, x)]))
    assert (found.op, found.data, found.scalar) == ("relax.minimum", 1, 0)
    assert read_minmax_primfunc(te.create_prim_func([x, y, topi.maximum(x, y)])) is None  # not a scalar
    assert read_minmax_primfunc(te.create_prim_func([x, topi.add(x, 0.5)])) is None
    assert read_minmax_primfunc(te.create_prim_func([x, topi.sum(x, axis=1)])) is None


@pytest.mark.parametrize("form", ["bert", "half_first", "half_inner", "div_two"])
def test_erf_gelu_written_out_becomes_gelu(form: str) -> None:
    g = Graph()
    model = g.model({"x": (4, 8)}, erf_gelu(g, "x", form), (4, 8))
    assert ops_of(import_rewritten(model)) == ["relax.nn.gelu"]


def test_gelu_new_becomes_gelu_tanh() -> None:
    g = Graph()
    model = g.model({"x": (4, 8)}, gelu_new(g, "x"), (4, 8))
    assert ops_of(import_rewritten(model)) == ["relax.nn.gelu_tanh"]


def test_constants_are_checked_by_value() -> None:
    g = Graph()
    model = g.model({"x": (4, 8)}, gelu_new(g, "x", cubic=0.05), (4, 8))
    assert "relax.nn.gelu_tanh" not in ops_of(import_rewritten(model))
    # one float16 ulp off sqrt 2 is sqrt 2 in float16, but not in float32
    assert constant_matches(relax.const(SQRT2, "float16"), SQRT2)
    assert constant_matches(relax.const(np.float32(SQRT2)), SQRT2)
    assert not constant_matches(relax.const(np.float32(SQRT2 * (1 + 2**-20))), SQRT2 * (1 - 2**-20))
    assert not constant_matches(relax.const(1.5), SQRT2)


def test_silu_written_out_becomes_silu() -> None:
    g = Graph()
    model = g.model({"x": (4, 8)}, g.op("Mul", g.op("Sigmoid", "x"), "x"), (4, 8))
    assert ops_of(import_rewritten(model)) == ["relax.nn.silu"]
    g = Graph()  # x * sigmoid(y) is a gate, not a SiLU
    model = g.model({"x": (4, 8), "y": (4, 8)}, g.op("Mul", g.op("Sigmoid", "y"), "x"), (4, 8))
    assert "relax.nn.silu" not in ops_of(import_rewritten(model))


# -- real blocks, end to end --------------------------------------------------------------------
def test_mobilenet_v2_block_with_relu6_is_one_region() -> None:
    """Inverted residual (expansion 1x1, 3x3, projection 1x1, skip), BN folded into biases."""
    g = Graph(1)
    c, e = 4, 8
    h = relu6(g, g.op("Conv", "x", g.weight(e, c, 1, 1), g.const(g.rng.standard_normal(e))))
    h = relu6(g, g.op("Conv", h, g.weight(e, e, 3, 3), g.const(g.rng.standard_normal(e)), pads=[1] * 4))
    h = g.op("Conv", h, g.weight(c, e, 1, 1), g.const(g.rng.standard_normal(c)))
    out = g.op("Add", h, "x")
    model = g.model({"x": (1, c, 5, 5)}, out, (1, c, 5, 5), opset=13)
    x = np.random.default_rng(2).standard_normal((1, c, 5, 5)).astype(np.float32) * 3
    _, report = check_one_region(model, {"x": x})
    assert report["regions"][0]["composites"].count("icca.conv2d_bias_clip") == 2


def test_bert_feed_forward_with_erf_gelu_is_one_region() -> None:
    g = Graph(3)
    d, f = 16, 32
    h = g.op("Add", g.op("MatMul", "x", g.weight(d, f)), g.const(g.rng.standard_normal(f) * 0.1))
    h = erf_gelu(g, h, "bert")
    out = g.op("Add", g.op("MatMul", h, g.weight(f, d)), g.const(g.rng.standard_normal(d) * 0.1))
    model = g.model({"x": (8, d)}, out, (8, d))
    x = np.random.default_rng(4).standard_normal((8, d)).astype(np.float32)
    check_one_region(model, {"x": x}, "icca.matmul_bias_gelu")


def test_gpt2_mlp_with_gelu_new_is_one_region() -> None:
    g = Graph(5)
    d, f = 16, 64
    h = g.op("Add", g.op("MatMul", "x", g.weight(d, f)), g.const(g.rng.standard_normal(f) * 0.1))
    out = g.op("Add", g.op("MatMul", gelu_new(g, h), g.weight(f, d)), g.const(np.zeros(d)))
    model = g.model({"x": (8, d)}, out, (8, d))
    x = np.random.default_rng(6).standard_normal((8, d)).astype(np.float32)
    check_one_region(model, {"x": x}, "icca.matmul_bias_gelu_tanh")


def test_llama_swiglu_mlp_is_one_region() -> None:
    """down(silu(x @ Wg) * (x @ Wu)), SiLU written as x * sigmoid(x) (torch exports)."""
    g = Graph(7)
    d, f = 16, 48
    gate = g.op("MatMul", "x", g.weight(d, f))
    up = g.op("MatMul", "x", g.weight(d, f))
    act = g.op("Mul", gate, g.op("Sigmoid", gate))
    out = g.op("MatMul", g.op("Mul", act, up), g.weight(f, d))
    model = g.model({"x": (8, d)}, out, (8, d))
    x = np.random.default_rng(8).standard_normal((8, d)).astype(np.float32)
    check_one_region(model, {"x": x}, "icca.matmul_silu", "icca.multiply")


def test_masked_fill_attention_scores_are_one_region() -> None:
    """softmax(where(mask, q @ k * scale, fill)): the bool mask comes from the host."""
    g = Graph(9)
    scores = g.op("Mul", g.op("MatMul", "q", "k"), g.const(0.25))
    out = g.op("Softmax", g.op("Where", "mask", scores, g.const(-np.inf)), axis=-1)
    model = g.model({"q": (2, 8, 16), "k": (2, 16, 8), "mask": (8, 8)}, out, (2, 8, 8),
                    input_types={"mask": TensorProto.BOOL})
    rng = np.random.default_rng(10)
    inputs = {"q": rng.standard_normal((2, 8, 16)).astype(np.float32),
              "k": rng.standard_normal((2, 16, 8)).astype(np.float32),
              "mask": np.tril(np.ones((8, 8), bool))}
    icca, _ = check_one_region(model, inputs, "icca.where", "icca.softmax", atol=1e-6)
    assert np.all(icca[:, np.triu_indices(8, 1)[0], np.triu_indices(8, 1)[1]] == 0)


def test_hard_swish_after_a_conv_is_one_region() -> None:
    g = Graph(11)
    h = g.op("Conv", "x", g.weight(8, 4, 3, 3), g.const(g.rng.standard_normal(8)), pads=[1] * 4)
    model = g.model({"x": (1, 4, 6, 6)}, g.op("HardSwish", h), (1, 8, 6, 6))
    x = np.random.default_rng(12).standard_normal((1, 4, 6, 6)).astype(np.float32) * 3
    _, report = check_one_region(model, {"x": x}, atol=1e-6)
    assert report["offloaded_ops"].get("relax.clip") == 1


def test_casts_between_float_dtypes_run_on_the_chip() -> None:
    g = Graph()
    h = g.op("Cast", g.op("Cast", "x", to=TensorProto.FLOAT16), to=TensorProto.BFLOAT16)
    out = g.op("Cast", g.op("Mul", h, g.op("Cast", g.const(2.0), to=TensorProto.BFLOAT16)),
               to=TensorProto.FLOAT)
    model = g.model({"x": (4, 8)}, out, (4, 8))
    x = (np.random.default_rng(13).standard_normal((4, 8)) * 100).astype(np.float32)
    icca, llvm, want, report = run_everywhere(model, {"x": x})
    np.testing.assert_array_equal(icca, want)  # every step rounds exactly as the reference does
    np.testing.assert_array_equal(icca, llvm)
    assert_one_region(report)
    assert report["offloaded_ops"]["relax.astype"] == 3


# -- normalizations written out ------------------------------------------------------------------
def rms_norm_written(g: Graph, x: str, d: int, form: str) -> str:
    """Llama's RMSNorm as torch exports it: w * (x * rsqrt(mean(x^2) + eps))."""
    square = g.op("Pow", x, g.const(2.0)) if form != "mul" else g.op("Mul", x, x)
    var = g.op("ReduceMean", square, axes=[-1], keepdims=1)
    root = g.op("Sqrt", g.op("Add", var, g.const(1e-6)))
    normed = g.op("Div", x, root) if form == "div" else g.op("Mul", x, g.op("Div", g.const(1.0), root))
    return g.op("Mul", g.const(np.random.default_rng(3).uniform(0.5, 1.5, d)), normed)


def layer_norm_written(g: Graph, x: str, d: int) -> str:
    """nn.LayerNorm as torch exports it below opset 17."""
    centered = g.op("Sub", x, g.op("ReduceMean", x, axes=[-1], keepdims=1))
    var = g.op("ReduceMean", g.op("Pow", centered, g.const(2.0)), axes=[-1], keepdims=1)
    normed = g.op("Div", centered, g.op("Sqrt", g.op("Add", var, g.const(1e-5))))
    return g.op("Add", g.op("Mul", normed, g.const(np.linspace(0.5, 1.5, d))), g.const(np.linspace(-0.1, 0.1, d)))


def import_norms(model: onnx.ModelProto) -> tvm.IRModule:
    return RecognizeNorms()(relax.transform.FoldConstant()(tvm_icca.load_onnx(model)))


@pytest.mark.parametrize("form", ["pow", "mul", "div"])
def test_rms_norm_written_out_becomes_rms_norm(form: str) -> None:
    g = Graph(11)
    out = rms_norm_written(g, "x", 16, form)
    ops = ops_of(import_norms(g.model({"x": (2, 4, 16)}, out, (2, 4, 16))))
    assert ops == ["relax.nn.rms_norm"], ops


def test_layer_norm_written_out_becomes_layer_norm() -> None:
    g = Graph(12)
    out = layer_norm_written(g, "x", 16)
    ops = ops_of(import_norms(g.model({"x": (2, 4, 16)}, out, (2, 4, 16), opset=14)))
    assert ops == ["relax.nn.layer_norm"], ops


def test_norms_over_other_axes_or_without_epsilon_are_left_alone() -> None:
    g = Graph(13)  # mean over the first axis: not a per-row norm
    var = g.op("ReduceMean", g.op("Pow", "x", g.const(2.0)), axes=[0], keepdims=1)
    out = g.op("Mul", g.const(np.ones(16)), g.op("Div", "x", g.op("Sqrt", g.op("Add", var, g.const(1e-6)))))
    assert "relax.nn.rms_norm" not in ops_of(import_norms(g.model({"x": (4, 16)}, out, (4, 16))))
    g = Graph(14)  # epsilon 0 is not a norm the Relax op computes the same way at x = 0
    var = g.op("ReduceMean", g.op("Pow", "x", g.const(2.0)), axes=[-1], keepdims=1)
    out = g.op("Mul", g.const(np.ones(16)), g.op("Div", "x", g.op("Sqrt", g.op("Add", var, g.const(0.0)))))
    assert "relax.nn.rms_norm" not in ops_of(import_norms(g.model({"x": (4, 16)}, out, (4, 16))))


def test_written_out_norms_run_on_the_chip_in_one_region() -> None:
    """RMS norm then a matmul, and a layer norm after a residual add (opset 14)."""
    g = Graph(15)
    h = g.op("MatMul", rms_norm_written(g, "x", 16, "pow"), g.weight(16, 16))
    out = layer_norm_written(g, g.op("Add", h, "x"), 16)
    model = g.model({"x": (8, 16)}, out, (8, 16), opset=14)
    x = np.random.default_rng(16).standard_normal((8, 16)).astype(np.float32)
    check_one_region(model, {"x": x}, "icca.rms_norm", "icca.layer_norm")


def test_elementwise_math_exporters_write_runs_on_the_chip() -> None:
    """Pow, Sqrt, Log, Abs, Sin, Cos and Div left over when no rewrite names the whole (a norm with an
    unusual form, a custom activation) still run on the chip."""
    g = Graph(17)
    a = g.op("Add", g.op("Abs", "x"), g.const(1.0))
    out = g.op("Add", g.op("Pow", a, g.const(1.5)), g.op("Div", g.op("Log", a), g.op("Sqrt", a)))
    out = g.op("Add", out, g.op("Mul", g.op("Sin", "x"), g.op("Cos", a)))  # sinusoidal embeddings
    model = g.model({"x": (8, 16)}, out, (8, 16))
    x = np.random.default_rng(18).standard_normal((8, 16)).astype(np.float32)
    icca, llvm, want, report = run_everywhere(model, {"x": x})
    tvm.testing.assert_allclose(icca, want, rtol=1e-5, atol=1e-5)
    tvm.testing.assert_allclose(icca, llvm, rtol=1e-5, atol=1e-5)
    assert_one_region(report, "icca.power", "icca.log", "icca.sqrt", "icca.abs", "icca.sin",
                      "icca.cos")
