"""Small ONNX models built with ``onnx.helper``, each with an independent numpy reference.

The references are written directly in numpy from the ONNX operator definitions; they share
nothing with TVM or tvm_icca, so agreement with them is evidence that the whole path
(import, partitioning, plans, simulated device) computes the right answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20  # Gelu and LayerNormalization are standard ops from opset 20 / 17.


@dataclass
class OnnxCase:
    """An ONNX model, example inputs, and a numpy function computing its outputs."""

    name: str
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    reference: Callable[[dict[str, np.ndarray]], list[np.ndarray]]


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.weights: dict[str, np.ndarray] = {}
        self._count = 0

    def weight(self, name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = shape[-1] if len(shape) < 4 else int(np.prod(shape[1:]))
        scale = scale if scale is not None else 1.0 / math.sqrt(max(fan_in, 1))
        value = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.weights[name] = value
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        self.weights[name] = value
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        self._count += 1
        out = f"{op.lower()}_{self._count}"
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def model(self, name: str, inputs: dict[str, tuple[int, ...]], output: str,
              out_shape: tuple[int, ...]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in inputs.items()],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(out_shape))],
            initializer=self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 9
        onnx.checker.check_model(model)
        return model


# -- numpy reference pieces (from the ONNX operator definitions) ------------------------------
def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def conv2d_reference(x: np.ndarray, w: np.ndarray, stride: int = 1, pad: int = 0,
                     dilation: int = 1) -> np.ndarray:
    """NCHW convolution in float64 with numpy alone: the independent reference of the tests."""
    n, _, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, f, oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dilation: i * dilation + stride * oh: stride,
                       j * dilation: j * dilation + stride * ow: stride]
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j])
    return out


def _conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int) -> np.ndarray:
    return conv2d_reference(x, w, stride, pad) + b.reshape(1, -1, 1, 1)


# -- models ------------------------------------------------------------------------------------
def mlp(batch: int = 8, sizes: tuple[int, ...] = (64, 128, 64, 10), seed: int = 0) -> OnnxCase:
    """Gemm(transB) + Relu layers, then Softmax."""
    b = _Builder(seed)
    x = "x"
    for i, (din, dout) in enumerate(zip(sizes, sizes[1:])):
        w = b.weight(f"w{i}", (dout, din))
        bias = b.weight(f"b{i}", (dout,), 0.1)
        x = b.node("Gemm", [x, w, bias], transB=1)
        if i < len(sizes) - 2:
            x = b.node("Relu", [x])
    out = b.node("Softmax", [x], axis=-1)
    model = b.model("mlp", {"x": (batch, sizes[0])}, out, (batch, sizes[-1]))
    weights = b.weights

    def reference(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        h = inputs["x"].astype(np.float64)
        for i in range(len(sizes) - 1):
            h = h @ weights[f"w{i}"].T + weights[f"b{i}"]
            if i < len(sizes) - 2:
                h = np.maximum(h, 0)
        return [_softmax(h)]

    x_val = np.random.default_rng(seed + 1).standard_normal((batch, sizes[0])).astype(np.float32)
    return OnnxCase("mlp", model, {"x": x_val}, reference)


def residual_cnn(batch: int = 2, channels: int = 8, size: int = 12, classes: int = 10,
                 blocks: int = 2, seed: int = 0) -> OnnxCase:
    """Stem conv, residual blocks (conv-relu-conv + skip, relu), a stride-2 conv, global
    average pooling (ReduceMean), flatten and a classifier Gemm."""
    b = _Builder(seed)
    stem_w = b.weight("stem_w", (channels, 3, 3, 3))
    stem_b = b.weight("stem_b", (channels,), 0.1)
    x = b.node("Relu", [b.node("Conv", ["x", stem_w, stem_b], pads=[1, 1, 1, 1])])
    for i in range(blocks):
        w1, b1 = b.weight(f"b{i}_w1", (channels,) * 2 + (3, 3)), b.weight(f"b{i}_b1", (channels,), 0.1)
        w2, b2 = b.weight(f"b{i}_w2", (channels,) * 2 + (3, 3)), b.weight(f"b{i}_b2", (channels,), 0.1)
        h = b.node("Relu", [b.node("Conv", [x, w1, b1], pads=[1, 1, 1, 1])])
        h = b.node("Conv", [h, w2, b2], pads=[1, 1, 1, 1])
        x = b.node("Relu", [b.node("Add", [h, x])])
    down_w = b.weight("down_w", (2 * channels, channels, 3, 3))
    down_b = b.weight("down_b", (2 * channels,), 0.1)
    x = b.node("Relu", [b.node("Conv", [x, down_w, down_b], pads=[1, 1, 1, 1], strides=[2, 2])])
    x = b.node("ReduceMean", [x, b.const("axes", np.array([2, 3], np.int64))], keepdims=0)
    fc_w = b.weight("fc_w", (classes, 2 * channels))
    fc_b = b.weight("fc_b", (classes,), 0.1)
    out = b.node("Gemm", [x, fc_w, fc_b], transB=1)
    model = b.model("residual_cnn", {"x": (batch, 3, size, size)}, out, (batch, classes))
    wt = b.weights

    def reference(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        relu = lambda v: np.maximum(v, 0)  # noqa: E731
        h = relu(_conv2d(inputs["x"].astype(np.float64), wt["stem_w"], wt["stem_b"], 1, 1))
        for i in range(blocks):
            r = relu(_conv2d(h, wt[f"b{i}_w1"], wt[f"b{i}_b1"], 1, 1))
            r = _conv2d(r, wt[f"b{i}_w2"], wt[f"b{i}_b2"], 1, 1)
            h = relu(r + h)
        h = relu(_conv2d(h, wt["down_w"], wt["down_b"], 2, 1))
        h = h.mean(axis=(2, 3))
        return [h @ wt["fc_w"].T + wt["fc_b"]]

    x_val = np.random.default_rng(seed + 1).standard_normal((batch, 3, size, size)).astype(np.float32)
    return OnnxCase("residual_cnn", model, {"x": x_val}, reference)


def transformer_encoder_layer(seq: int = 16, d_model: int = 32, heads: int = 2, d_ff: int = 64,
                              seed: int = 0) -> OnnxCase:
    """A pre-norm encoder layer: LayerNorm, multi-head self-attention (MatMul, scale,
    Softmax), residual, LayerNorm, FFN with Gelu, residual. Input [seq, d_model]."""
    b = _Builder(seed)
    dh = d_model // heads
    eps = 1e-5
    g1, be1 = b.const("ln1_g", np.ones(d_model, np.float32) * 1.1), b.weight("ln1_b", (d_model,), 0.1)
    g2, be2 = b.const("ln2_g", np.ones(d_model, np.float32) * 0.9), b.weight("ln2_b", (d_model,), 0.1)
    h = b.node("LayerNormalization", ["x", g1, be1], axis=-1, epsilon=eps)
    heads_shape = b.const("heads_shape", np.array([seq, heads, dh], np.int64))
    merged_shape = b.const("merged_shape", np.array([seq, d_model], np.int64))

    def project(tag: str, src: str) -> str:
        w = b.weight(f"w{tag}", (d_model, d_model))
        bias = b.weight(f"b{tag}", (d_model,), 0.1)
        return b.node("Add", [b.node("MatMul", [src, w]), bias])

    q = b.node("Transpose", [b.node("Reshape", [project("q", h), heads_shape])], perm=[1, 0, 2])
    k = b.node("Transpose", [b.node("Reshape", [project("k", h), heads_shape])], perm=[1, 2, 0])
    v = b.node("Transpose", [b.node("Reshape", [project("v", h), heads_shape])], perm=[1, 0, 2])
    scale = b.const("scale", np.array(1.0 / math.sqrt(dh), np.float32))
    scores = b.node("Mul", [b.node("MatMul", [q, k]), scale])
    attn = b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])
    attn = b.node("Reshape", [b.node("Transpose", [attn], perm=[1, 0, 2]), merged_shape])
    wo, bo = b.weight("wo", (d_model, d_model)), b.weight("bo", (d_model,), 0.1)
    x1 = b.node("Add", ["x", b.node("Add", [b.node("MatMul", [attn, wo]), bo])])
    h2 = b.node("LayerNormalization", [x1, g2, be2], axis=-1, epsilon=eps)
    w1, b1 = b.weight("w1", (d_model, d_ff)), b.weight("b1", (d_ff,), 0.1)
    w2, b2 = b.weight("w2", (d_ff, d_model)), b.weight("b2", (d_model,), 0.1)
    ff = b.node("Gelu", [b.node("Add", [b.node("MatMul", [h2, w1]), b1])])
    ff = b.node("Add", [b.node("MatMul", [ff, w2]), b2])
    out = b.node("Add", [x1, ff])
    model = b.model("encoder_layer", {"x": (seq, d_model)}, out, (seq, d_model))
    wt = b.weights

    def reference(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        x = inputs["x"].astype(np.float64)
        hh = _layer_norm(x, wt["ln1_g"], wt["ln1_b"], eps)
        qq = (hh @ wt["wq"] + wt["bq"]).reshape(seq, heads, dh).transpose(1, 0, 2)
        kk = (hh @ wt["wk"] + wt["bk"]).reshape(seq, heads, dh).transpose(1, 0, 2)
        vv = (hh @ wt["wv"] + wt["bv"]).reshape(seq, heads, dh).transpose(1, 0, 2)
        att = _softmax(qq @ kk.transpose(0, 2, 1) / math.sqrt(dh)) @ vv
        att = att.transpose(1, 0, 2).reshape(seq, d_model)
        x1v = x + att @ wt["wo"] + wt["bo"]
        ffv = _gelu(_layer_norm(x1v, wt["ln2_g"], wt["ln2_b"], eps) @ wt["w1"] + wt["b1"])
        return [x1v + ffv @ wt["w2"] + wt["b2"]]

    x_val = np.random.default_rng(seed + 1).standard_normal((seq, d_model)).astype(np.float32)
    return OnnxCase("encoder_layer", model, {"x": x_val}, reference)
