"""ONNX graphs shaped like what PyTorch's exporters emit for real architectures.

A user's model reaches tvm_icca as an export, not as hand-written Relax: attention heads
split with ``Reshape``/``Transpose`` whose target shapes are computed by ``Shape`` /
``Gather`` / ``Unsqueeze`` / ``Concat`` chains, GELU written out with ``Erf`` or with
``Pow``/``Tanh``, ReLU6 as ``Clip``, depthwise convolutions as ``Conv`` with ``group``,
batch norm after every convolution, fused qkv projections cut by ``Split``, rotary
embeddings built from ``Slice``/``Neg``/``Concat``, class tokens joined by ``Concat``,
strided 1-D convolutions over audio, ``GroupNorm`` through ``InstanceNormalization``,
reflection padding as ``Pad``.
Each builder here writes one such block with ``onnx.helper`` at the op patterns the
exporters use (small sizes, random weights), and the reference is the ONNX project's own
``onnx.reference.ReferenceEvaluator``, which shares nothing with TVM or tvm_icca.

:func:`check_case` compiles a case with ``tvm_icca.compile_onnx``, runs it on the VM and
reports the error against the reference, the regions of the partition, the device calls
of ``main`` and the ops left on the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["CORPUS", "CorpusResult", "ExportCase", "check_case", "float_host_ops",
           "reference_outputs"]

OPSET = 17  # what torch.onnx.export writes by default for these models


@dataclass
class ExportCase:
    """An exporter-shaped ONNX model and example inputs."""

    name: str
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    #: what the block is, in the words of the architecture it comes from
    description: str = ""


@dataclass
class CorpusResult:
    """How one case fared on the chip."""

    name: str
    max_rel_error: float
    regions: int
    device_calls: int
    offloaded_ops: dict[str, int] = field(default_factory=dict)
    host_ops: dict[str, int] = field(default_factory=dict)
    host_reasons: dict[str, list[str]] = field(default_factory=dict)
    #: the case's module after ``partition_for_icca`` (what the counts above read)
    partitioned: Any = field(default=None, repr=False, compare=False)


class GraphBuilder:
    """A tiny exporter: named nodes, initializers and Constant nodes like torch emits."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}

    def _name(self, op: str) -> str:
        n = self._count.get(op, 0)
        self._count[op] = n + 1
        return f"/{op}_{n}"

    def weight(self, name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:])) if len(shape) > 2 else 1
        scale = 1.0 / math.sqrt(max(fan_in, 1)) if scale is None else scale
        value = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def positive(self, name: str, shape: tuple[int, ...]) -> str:
        value = self.rng.uniform(0.5, 1.5, shape).astype(np.float32)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def constant(self, value: Any, dtype: Any = np.float32) -> str:
        """A ``Constant`` node (torch writes scalars and shapes this way)."""
        name = self._name("Constant")
        tensor = numpy_helper.from_array(np.asarray(value, dtype=dtype), name + "_value")
        self.nodes.append(helper.make_node("Constant", [], [name + "_output_0"], name=name,
                                           value=tensor))
        return name + "_output_0"

    def op(self, op: str, inputs: list[str], outputs: int = 1, **attrs: Any) -> Any:
        name = self._name(op)
        outs = [f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def model(self, name: str, inputs: dict[str, tuple[tuple[int, ...], int]],
              outputs: dict[str, str], opset: int = OPSET) -> onnx.ModelProto:
        """``inputs``: name -> (shape, ONNX elem type); ``outputs``: graph name -> value."""
        nodes = list(self.nodes)
        for out_name, value in outputs.items():
            nodes.append(helper.make_node("Identity", [value], [out_name], name=f"/out_{out_name}"))
        graph = helper.make_graph(
            nodes, name,
            [helper.make_tensor_value_info(k, t, list(s)) for k, (s, t) in inputs.items()],
            [helper.make_tensor_value_info(k, TensorProto.UNDEFINED, None) for k in outputs],
            initializer=self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        model = onnx.shape_inference.infer_shapes(model)
        onnx.checker.check_model(model)
        return model

    # -- blocks that exporters write the same way in every model --------------------------
    def linear(self, x: str, d_in: int, d_out: int, prefix: str) -> str:
        w = self.weight(f"{prefix}.weight_t", (d_in, d_out))
        b = self.weight(f"{prefix}.bias", (d_out,), scale=0.1)
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layer_norm(self, x: str, d: int, prefix: str) -> str:
        gamma = self.positive(f"{prefix}.weight", (d,))
        beta = self.weight(f"{prefix}.bias", (d,), scale=0.1)
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)

    def layer_norm_written(self, x: str, d: int, prefix: str) -> str:
        """``nn.LayerNorm`` as torch exports it below opset 17 (no LayerNormalization op)."""
        mean = self.op("ReduceMean", [x], axes=[-1], keepdims=1)
        centered = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [centered, self.constant(2.0)])],
                      axes=[-1], keepdims=1)
        std = self.op("Sqrt", [self.op("Add", [var, self.constant(1e-12)])])
        normed = self.op("Div", [centered, std])
        return self.op("Add", [self.op("Mul", [normed, self.positive(f"{prefix}.weight", (d,))]),
                               self.weight(f"{prefix}.bias", (d,), scale=0.1)])

    def dynamic_shape(self, x: str, keep: list[int], tail: list[int]) -> str:
        """``Shape -> Gather -> Unsqueeze -> Concat``: the dims ``keep`` of ``x`` followed by
        constants ``tail``, as the TorchScript exporter writes ``x.view(b, s, h, d)``."""
        shape = self.op("Shape", [x])
        parts = []
        for dim in keep:
            got = self.op("Gather", [shape, self.constant(dim, np.int64)], axis=0)
            parts.append(self.op("Unsqueeze", [got, self.constant([0], np.int64)]))
        parts += [self.constant([t], np.int64) for t in tail]
        return self.op("Concat", parts, axis=0)

    def heads(self, x: str, heads: int, d_head: int) -> str:
        """[B, S, H*D] -> [B, H, S, D]."""
        view = self.op("Reshape", [x, self.dynamic_shape(x, [0, 1], [heads, d_head])])
        return self.op("Transpose", [view], perm=[0, 2, 1, 3])

    def merge_heads(self, x: str, d_model: int) -> str:
        """[B, H, S, D] -> [B, S, H*D]."""
        back = self.op("Transpose", [x], perm=[0, 2, 1, 3])
        return self.op("Reshape", [back, self.dynamic_shape(back, [0, 1], [d_model])])

    def attention(self, q: str, k: str, v: str, heads: int, d_head: int, d_model: int,
                  mask: str | None) -> str:
        qh, kh, vh = (self.heads(t, heads, d_head) for t in (q, k, v))
        kt = self.op("Transpose", [kh], perm=[0, 1, 3, 2])
        scores = self.op("Div", [self.op("MatMul", [qh, kt]),
                                 self.constant(math.sqrt(d_head))])
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        probs = self.op("Softmax", [scores], axis=-1)
        return self.merge_heads(self.op("MatMul", [probs, vh]), d_model)

    def gelu_erf(self, x: str) -> str:
        """``x * 0.5 * (1 + erf(x / sqrt(2)))`` as HF BERT/ViT exports it at opset < 20."""
        erf = self.op("Erf", [self.op("Div", [x, self.constant(math.sqrt(2.0))])])
        half = self.op("Mul", [x, self.constant(0.5)])
        return self.op("Mul", [half, self.op("Add", [erf, self.constant(1.0)])])

    def gelu_tanh(self, x: str) -> str:
        """GPT-2's ``gelu_new``: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
        cube = self.op("Pow", [x, self.constant(3.0)])
        inner = self.op("Add", [x, self.op("Mul", [self.constant(0.044715), cube])])
        t = self.op("Tanh", [self.op("Mul", [self.constant(math.sqrt(2.0 / math.pi)), inner])])
        half = self.op("Mul", [self.constant(0.5), x])
        return self.op("Mul", [half, self.op("Add", [self.constant(1.0), t])])

    def conv_bn(self, x: str, c_in: int, c_out: int, k: int, stride: int, group: int,
                prefix: str) -> str:
        """Conv (no bias) + BatchNormalization, as torchvision exports in eval mode."""
        w = self.weight(f"{prefix}.conv.weight", (c_out, c_in // group, k, k))
        conv = self.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
                       pads=[k // 2] * 4, group=group)
        scale = self.positive(f"{prefix}.bn.weight", (c_out,))
        bias = self.weight(f"{prefix}.bn.bias", (c_out,), scale=0.1)
        mean = self.weight(f"{prefix}.bn.running_mean", (c_out,), scale=0.1)
        var = self.positive(f"{prefix}.bn.running_var", (c_out,))
        return self.op("BatchNormalization", [conv, scale, bias, mean, var], epsilon=1e-5)

    def relu6(self, x: str) -> str:
        return self.op("Clip", [x, self.constant(0.0), self.constant(6.0)])

    def instance_norm(self, x: str, channels: int, prefix: str) -> str:
        """``nn.InstanceNorm`` without affine parameters: ``InstanceNormalization`` with a
        scale of ones and a bias of zeros, as torch exports it."""
        return self.op("InstanceNormalization", [
            x, self.init(f"{prefix}.ones", np.ones(channels, np.float32)),
            self.init(f"{prefix}.zeros", np.zeros(channels, np.float32))], epsilon=1e-5)

    def group_norm(self, x: str, shape: tuple[int, ...], groups: int, prefix: str) -> str:
        """``nn.GroupNorm`` as torch exports it below opset 18: ``Reshape`` to
        ``[N, G, -1]``, ``InstanceNormalization`` of the groups, ``Reshape`` back, then the
        per-channel weight and bias (``Mul``, ``Add``)."""
        grouped = self.op("Reshape", [x, self.constant([shape[0], groups, -1], np.int64)])
        normed = self.instance_norm(grouped, groups, prefix)
        back = self.op("Reshape", [normed, self.constant(list(shape), np.int64)])
        per_channel = (shape[1],) + (1,) * (len(shape) - 2)
        return self.op("Add", [self.op("Mul", [back, self.positive(f"{prefix}.weight", per_channel)]),
                               self.weight(f"{prefix}.bias", per_channel, scale=0.1)])

    def pad(self, x: str, pads: list[int], mode: str) -> str:
        """``F.pad`` / ``nn.ReflectionPad2d``: ``Pad`` with its widths as a constant."""
        return self.op("Pad", [x, self.constant(pads, np.int64)], mode=mode)


# -- the corpus ----------------------------------------------------------------------------
def bert_layer(batch: int = 2, seq: int = 8, d_model: int = 32, heads: int = 2,
               seed: int = 0, opset: int = OPSET) -> ExportCase:
    """A Hugging Face BERT encoder layer: extended attention mask from an int64 mask, heads
    split by computed shapes, erf-GELU written out, post-layer-norm residuals (layer norm
    written out op by op below opset 17, as torch exports it there)."""
    g = GraphBuilder(seed)
    if opset < 17:
        g.layer_norm = g.layer_norm_written  # type: ignore[method-assign]
    d_head = d_model // heads
    ext = g.op("Unsqueeze", ["attention_mask", g.constant([1, 2], np.int64)])
    ext = g.op("Cast", [ext], to=TensorProto.FLOAT)
    ext = g.op("Mul", [g.op("Sub", [g.constant(1.0), ext]), g.constant(-3.4028234663852886e38)])
    q, k, v = (g.linear("hidden", d_model, d_model, f"attn.{n}") for n in "qkv")
    ctx = g.attention(q, k, v, heads, d_head, d_model, ext)
    h = g.layer_norm(g.op("Add", [g.linear(ctx, d_model, d_model, "attn.out"), "hidden"]),
                     d_model, "ln1")
    ff = g.linear(g.gelu_erf(g.linear(h, d_model, 4 * d_model, "ff.in")), 4 * d_model,
                  d_model, "ff.out")
    out = g.layer_norm(g.op("Add", [ff, h]), d_model, "ln2")
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq - 2:] = 0
    model = g.model("bert_layer", {"hidden": ((batch, seq, d_model), TensorProto.FLOAT),
                                   "attention_mask": ((batch, seq), TensorProto.INT64)},
                    {"output": out}, opset)
    inputs = {"hidden": g.rng.standard_normal((batch, seq, d_model)).astype(np.float32),
              "attention_mask": mask}
    name = "bert_layer" if opset == OPSET else f"bert_layer_opset{opset}"
    return ExportCase(name, model, inputs, f"BERT encoder layer (HF export, opset {opset})")


def gpt2_block(batch: int = 1, seq: int = 8, d_model: int = 32, heads: int = 2,
               seed: int = 1) -> ExportCase:
    """A GPT-2 block: fused qkv cut by ``Split``, causal mask applied with ``Where`` to the
    dtype's minimum (``ConstantOfShape`` with an empty shape makes the scalar), gelu_new."""
    g = GraphBuilder(seed)
    d_head = d_model // heads
    x = g.layer_norm("hidden", d_model, "ln_1")
    qkv = g.linear(x, d_model, 3 * d_model, "attn.c_attn")
    q, k, v = g.op("Split", [qkv, g.constant([d_model] * 3, np.int64)], outputs=3, axis=2)
    qh, kh, vh = (g.heads(t, heads, d_head) for t in (q, k, v))
    scores = g.op("Div", [g.op("MatMul", [qh, g.op("Transpose", [kh], perm=[0, 1, 3, 2])]),
                          g.constant(math.sqrt(d_head))])
    causal = g.init("attn.bias", np.tril(np.ones((1, 1, seq, seq), dtype=bool)))
    minimum = g.op("ConstantOfShape", [g.constant(np.zeros((0,), np.int64), np.int64)],
                   value=numpy_helper.from_array(np.array([np.finfo(np.float32).min],
                                                          np.float32)))
    scores = g.op("Where", [causal, scores, minimum])
    ctx = g.merge_heads(g.op("MatMul", [g.op("Softmax", [scores], axis=-1), vh]), d_model)
    h = g.op("Add", [g.linear(ctx, d_model, d_model, "attn.c_proj"), "hidden"])
    m = g.gelu_tanh(g.linear(g.layer_norm(h, d_model, "ln_2"), d_model, 4 * d_model, "mlp.c_fc"))
    out = g.op("Add", [g.linear(m, 4 * d_model, d_model, "mlp.c_proj"), h])
    model = g.model("gpt2_block", {"hidden": ((batch, seq, d_model), TensorProto.FLOAT)},
                    {"output": out})
    inputs = {"hidden": g.rng.standard_normal((batch, seq, d_model)).astype(np.float32)}
    return ExportCase("gpt2_block", model, inputs, "GPT-2 block (HF export)")


def vit_embed_block(batch: int = 2, size: int = 16, patch: int = 4, d_model: int = 32,
                    heads: int = 2, seed: int = 2) -> ExportCase:
    """ViT: patch embedding by a strided Conv, ``Flatten``-style reshape and transpose, the
    class token expanded and concatenated, position embeddings, one pre-norm layer."""
    g = GraphBuilder(seed)
    d_head = d_model // heads
    w = g.weight("patch.weight", (d_model, 3, patch, patch))
    b = g.weight("patch.bias", (d_model,), scale=0.1)
    conv = g.op("Conv", ["pixels", w, b], kernel_shape=[patch, patch], strides=[patch, patch])
    # torch writes x.flatten(2) as a Reshape to a computed shape
    flat = g.op("Reshape", [conv, g.dynamic_shape(conv, [0, 1], [-1])])
    tokens = g.op("Transpose", [flat], perm=[0, 2, 1])
    n = (size // patch) ** 2
    cls = g.weight("cls_token", (1, 1, d_model), scale=0.02)
    cls = g.op("Expand", [cls, g.constant([batch, 1, d_model], np.int64)])
    x = g.op("Add", [g.op("Concat", [cls, tokens], axis=1),
                     g.weight("pos_embed", (1, n + 1, d_model), scale=0.02)])
    y = g.layer_norm(x, d_model, "ln1")
    q, k, v = (g.linear(y, d_model, d_model, f"attn.{c}") for c in "qkv")
    x = g.op("Add", [x, g.linear(g.attention(q, k, v, heads, d_head, d_model, None),
                                 d_model, d_model, "attn.proj")])
    y = g.gelu_erf(g.linear(g.layer_norm(x, d_model, "ln2"), d_model, 2 * d_model, "mlp.fc1"))
    out = g.op("Add", [x, g.linear(y, 2 * d_model, d_model, "mlp.fc2")])
    model = g.model("vit_embed_block", {"pixels": ((batch, 3, size, size), TensorProto.FLOAT)},
                    {"output": out})
    inputs = {"pixels": g.rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
    return ExportCase("vit_embed_block", model, inputs, "ViT embedding + encoder layer")


def mobilenet_v2_block(batch: int = 1, channels: int = 8, size: int = 12, expand: int = 4,
                       seed: int = 3) -> ExportCase:
    """Two MobileNetV2 inverted residuals (stride 1 with the residual, then stride 2):
    1x1 expand conv + BN + ReLU6, 3x3 depthwise conv + BN + ReLU6, 1x1 project conv + BN."""
    g = GraphBuilder(seed)
    x = "input"
    for i, stride in enumerate((1, 2)):
        hidden = channels * expand
        y = g.relu6(g.conv_bn(x, channels, hidden, 1, 1, 1, f"b{i}.expand"))
        y = g.relu6(g.conv_bn(y, hidden, hidden, 3, stride, hidden, f"b{i}.dw"))
        y = g.conv_bn(y, hidden, channels, 1, 1, 1, f"b{i}.project")
        x = g.op("Add", [x, y]) if stride == 1 else y
    model = g.model("mobilenet_v2_block", {"input": ((batch, channels, size, size),
                                                     TensorProto.FLOAT)}, {"output": x})
    inputs = {"input": g.rng.standard_normal((batch, channels, size, size)).astype(np.float32)}
    return ExportCase("mobilenet_v2_block", model, inputs, "MobileNetV2 inverted residuals")


def squeezenet_fire(batch: int = 1, channels: int = 8, size: int = 13, seed: int = 4) -> ExportCase:
    """A SqueezeNet fire module after a max pool: squeeze 1x1 + ReLU, expand 1x1 and 3x3 +
    ReLU, ``Concat`` on channels."""
    g = GraphBuilder(seed)
    pooled = g.op("MaxPool", ["input"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    squeeze = g.op("Relu", [g.op("Conv", [pooled, g.weight("squeeze.weight", (4, channels, 1, 1)),
                                          g.weight("squeeze.bias", (4,), 0.1)],
                                 kernel_shape=[1, 1])])
    e1 = g.op("Relu", [g.op("Conv", [squeeze, g.weight("e1.weight", (8, 4, 1, 1)),
                                     g.weight("e1.bias", (8,), 0.1)], kernel_shape=[1, 1])])
    e3 = g.op("Relu", [g.op("Conv", [squeeze, g.weight("e3.weight", (8, 4, 3, 3)),
                                     g.weight("e3.bias", (8,), 0.1)], kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])])
    out = g.op("Concat", [e1, e3], axis=1)
    model = g.model("squeezenet_fire", {"input": ((batch, channels, size, size),
                                                  TensorProto.FLOAT)}, {"output": out})
    inputs = {"input": g.rng.standard_normal((batch, channels, size, size)).astype(np.float32)}
    return ExportCase("squeezenet_fire", model, inputs, "SqueezeNet fire module")


def resnet_stem_head(batch: int = 1, size: int = 16, channels: int = 8, classes: int = 10,
                     seed: int = 5) -> ExportCase:
    """ResNet: 7x7/2 stem conv + BN + ReLU, 3x3/2 max pool, one basic block, global average
    pool, ``Flatten``, ``Gemm`` classifier (transB=1, as torch writes nn.Linear)."""
    g = GraphBuilder(seed)
    x = g.op("Relu", [g.conv_bn("input", 3, channels, 7, 2, 1, "stem")])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.op("Relu", [g.conv_bn(x, channels, channels, 3, 1, 1, "block.conv1")])
    y = g.conv_bn(y, channels, channels, 3, 1, 1, "block.conv2")
    x = g.op("Relu", [g.op("Add", [y, x])])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    out = g.op("Gemm", [x, g.weight("fc.weight", (classes, channels)),
                        g.weight("fc.bias", (classes,), 0.1)], transB=1)
    model = g.model("resnet_stem_head", {"input": ((batch, 3, size, size), TensorProto.FLOAT)},
                    {"output": out})
    inputs = {"input": g.rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
    return ExportCase("resnet_stem_head", model, inputs, "ResNet stem, basic block and head")


def llama_block(batch: int = 1, seq: int = 8, d_model: int = 32, heads: int = 2,
                d_ff: int = 48, seed: int = 6) -> ExportCase:
    """A Llama decoder layer as exported: RMS norm written out (Pow, ReduceMean, Add, Sqrt,
    Div), rotary embeddings (Slice, Neg, Concat, Mul, Add) with cos/sin tables, a causal
    additive mask, SwiGLU written out (Sigmoid, Mul, Mul)."""
    g = GraphBuilder(seed)
    d_head = d_model // heads

    def rms_norm(x: str, prefix: str) -> str:
        var = g.op("ReduceMean", [g.op("Pow", [x, g.constant(2.0)])], axes=[-1], keepdims=1)
        rstd = g.op("Div", [g.constant(1.0), g.op("Sqrt", [g.op("Add", [var, g.constant(1e-6)])])])
        return g.op("Mul", [g.positive(f"{prefix}.weight", (d_model,)), g.op("Mul", [x, rstd])])

    def rotary(x: str) -> str:  # x: [B, H, S, D]
        half = d_head // 2
        x1 = g.op("Slice", [x, g.constant([0], np.int64), g.constant([half], np.int64),
                            g.constant([3], np.int64), g.constant([1], np.int64)])
        x2 = g.op("Slice", [x, g.constant([half], np.int64), g.constant([d_head], np.int64),
                            g.constant([3], np.int64), g.constant([1], np.int64)])
        rotated = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
        return g.op("Add", [g.op("Mul", [x, "cos"]), g.op("Mul", [rotated, "sin"])])

    inv = 1.0 / 10000 ** (np.arange(0, d_head, 2) / d_head)
    angles = np.outer(np.arange(seq), inv)
    angles = np.concatenate([angles, angles], axis=-1)[None, None]
    g.init("cos", np.cos(angles).astype(np.float32))
    g.init("sin", np.sin(angles).astype(np.float32))
    mask = np.triu(np.full((seq, seq), np.finfo(np.float32).min, np.float32), 1)[None, None]
    g.init("causal_mask", mask)

    x = rms_norm("hidden", "input_layernorm")
    q, k, v = (g.op("MatMul", [x, g.weight(f"attn.{c}_proj", (d_model, d_model))]) for c in "qkv")
    qh, kh = (rotary(g.heads(t, heads, d_head)) for t in (q, k))
    vh = g.heads(v, heads, d_head)
    scores = g.op("Div", [g.op("MatMul", [qh, g.op("Transpose", [kh], perm=[0, 1, 3, 2])]),
                          g.constant(math.sqrt(d_head))])
    probs = g.op("Softmax", [g.op("Add", [scores, "causal_mask"])], axis=-1)
    ctx = g.merge_heads(g.op("MatMul", [probs, vh]), d_model)
    h = g.op("Add", ["hidden", g.op("MatMul", [ctx, g.weight("attn.o_proj", (d_model, d_model))])])
    y = rms_norm(h, "post_attention_layernorm")
    gate = g.op("MatMul", [y, g.weight("mlp.gate_proj", (d_model, d_ff))])
    up = g.op("MatMul", [y, g.weight("mlp.up_proj", (d_model, d_ff))])
    act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
    out = g.op("Add", [h, g.op("MatMul", [act, g.weight("mlp.down_proj", (d_ff, d_model))])])
    model = g.model("llama_block", {"hidden": ((batch, seq, d_model), TensorProto.FLOAT)},
                    {"output": out})
    inputs = {"hidden": g.rng.standard_normal((batch, seq, d_model)).astype(np.float32)}
    return ExportCase("llama_block", model, inputs, "Llama decoder layer with rotary embeddings")


def token_embedding(batch: int = 2, seq: int = 8, vocab: int = 50, d_model: int = 32,
                    seed: int = 7) -> ExportCase:
    """Token and position embeddings looked up with ``Gather`` (BERT/GPT-2 inputs), summed and
    layer-normed."""
    g = GraphBuilder(seed)
    tok = g.op("Gather", [g.weight("wte", (vocab, d_model), 0.02), "input_ids"], axis=0)
    pos = g.op("Gather", [g.weight("wpe", (seq, d_model), 0.02), "position_ids"], axis=0)
    out = g.layer_norm(g.op("Add", [tok, pos]), d_model, "ln")
    model = g.model("token_embedding", {"input_ids": ((batch, seq), TensorProto.INT64),
                                        "position_ids": ((1, seq), TensorProto.INT64)},
                    {"output": out})
    inputs = {"input_ids": g.rng.integers(0, vocab, (batch, seq)).astype(np.int64),
              "position_ids": np.arange(seq, dtype=np.int64)[None]}
    return ExportCase("token_embedding", model, inputs, "token + position embeddings")


def wav2vec2_feature_encoder(batch: int = 1, samples: int = 400, channels: int = 16,
                             seed: int = 8) -> ExportCase:
    """wav2vec2's feature encoder (and HuBERT's): strided ``Conv`` over the raw waveform
    (kernel 10 stride 5, then 3/2 and 2/2, no bias), ``nn.GroupNorm`` with one group per
    channel after the first conv, GELU written out with ``Erf`` after each, as
    ``torch.onnx.export`` writes it at opset 17."""
    g = GraphBuilder(seed)
    x, length, c_in = "input_values", samples, 1
    for i, (k, stride) in enumerate(((10, 5), (3, 2), (2, 2))):
        w = g.weight(f"conv{i}.weight", (channels, c_in, k))
        x = g.op("Conv", [x, w], kernel_shape=[k], strides=[stride])
        length = (length - k) // stride + 1
        if i == 0:
            x = g.group_norm(x, (batch, channels, length), channels, "norm0")
        x, c_in = g.gelu_erf(x), channels
    model = g.model("wav2vec2_feature_encoder", {"input_values": ((batch, 1, samples),
                                                                  TensorProto.FLOAT)},
                    {"output": x})
    inputs = {"input_values": g.rng.standard_normal((batch, 1, samples)).astype(np.float32)}
    return ExportCase("wav2vec2_feature_encoder", model, inputs, "wav2vec2 feature encoder")


def cyclegan_resnet_block(batch: int = 1, channels: int = 8, size: int = 12,
                          seed: int = 9) -> ExportCase:
    """The ResNet generator of pix2pix / CycleGAN: ``ReflectionPad2d(3)``, 7x7 conv,
    ``InstanceNorm2d``, ReLU, then a residual block of ``ReflectionPad2d(1)``, 3x3 conv,
    instance norm (twice, ReLU between) and the residual ``Add``; the convs pad nothing
    themselves. ``Pad`` has mode reflect, its widths a constant."""
    g = GraphBuilder(seed)
    pads = lambda p: [0, 0, p, p, 0, 0, p, p]  # noqa: E731 -- ONNX order: begins, then ends

    def conv_norm(x: str, c_in: int, k: int, prefix: str) -> str:
        x = g.pad(x, pads(k // 2), "reflect")
        w = g.weight(f"{prefix}.weight", (channels, c_in, k, k))
        x = g.op("Conv", [x, w, g.weight(f"{prefix}.bias", (channels,), 0.1)], kernel_shape=[k, k])
        return g.instance_norm(x, channels, prefix)

    stem = g.op("Relu", [conv_norm("input", 3, 7, "stem")])
    y = g.op("Relu", [conv_norm(stem, channels, 3, "block.0")])
    out = g.op("Add", [stem, conv_norm(y, channels, 3, "block.1")])
    model = g.model("cyclegan_resnet_block", {"input": ((batch, 3, size, size), TensorProto.FLOAT)},
                    {"output": out})
    inputs = {"input": g.rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
    return ExportCase("cyclegan_resnet_block", model, inputs, "CycleGAN ResNet generator block")


#: Every builder, by case name.
CORPUS: dict[str, Callable[[], ExportCase]] = {
    "bert_layer": bert_layer,
    "bert_layer_opset14": lambda: bert_layer(opset=14),
    "gpt2_block": gpt2_block,
    "vit_embed_block": vit_embed_block,
    "mobilenet_v2_block": mobilenet_v2_block,
    "squeezenet_fire": squeezenet_fire,
    "resnet_stem_head": resnet_stem_head,
    "llama_block": llama_block,
    "token_embedding": token_embedding,
    "wav2vec2_feature_encoder": wav2vec2_feature_encoder,
    "cyclegan_resnet_block": cyclegan_resnet_block,
}


def reference_outputs(case: ExportCase) -> list[np.ndarray]:
    """The case's outputs computed by ``onnx.reference.ReferenceEvaluator``."""
    from onnx.reference import ReferenceEvaluator  # pylint: disable=import-outside-toplevel

    return list(ReferenceEvaluator(case.model).run(None, case.inputs))


def _region_calls(mod: Any) -> int:
    """Calls of offloaded regions in ``main`` of a partitioned module."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    from tvm_icca.partition.partitioner import (  # pylint: disable=import-outside-toplevel
        icca_regions,
    )

    names = set(icca_regions(mod))
    count = 0

    def visit(node: Any) -> None:
        nonlocal count
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.GlobalVar) \
                and node.op.name_hint in names:
            count += 1

    relax.analysis.post_order_visit(mod["main"], visit)
    return count


def float_host_ops(mod: Any) -> list[str]:
    """The Relax ops left in ``main`` of the partitioned module ``mod`` that read and write
    floating-point data, one entry per call: what real exports must not leave on the host
    (integer index, shape and mask arithmetic may stay there)."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    found: list[str] = []

    def is_float(ty: Any) -> bool:
        return isinstance(ty, relax.TensorType) and "float" in str(ty.dtype)

    def visit(node: Any) -> None:
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op):
            args = [a for a in node.args if isinstance(a, relax.Expr) and hasattr(a, "ty")]
            if is_float(node.ty) and any(is_float(a.ty) for a in args):
                found.append(node.op.name)

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


def check_case(case: ExportCase, hw: Any) -> CorpusResult:
    """Compile ``case`` for ``hw``, run it on the VM, compare with the ONNX reference."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    from tvm_icca import (  # pylint: disable=import-outside-toplevel
        compile_onnx,
        load_onnx,
        partition_for_icca,
        partition_report,
    )

    part = partition_for_icca(load_onnx(case.model), hw=hw)
    report = partition_report(part)
    vm = relax.VirtualMachine(compile_onnx(case.model, hw=hw), tvm.cpu())
    names = [i.name for i in case.model.graph.input]
    got = vm["main"](*(tvm.runtime.tensor(case.inputs[n]) for n in names))
    got = [got] if not isinstance(got, (list, tuple, tvm.ir.Array)) else list(got)
    want = reference_outputs(case)
    error = 0.0
    for g_out, w_out in zip(got, want):
        g_np = g_out.numpy()
        scale = max(float(np.abs(w_out).max()), 1e-6)
        error = max(error, float(np.abs(g_np - w_out).max()) / scale)
    return CorpusResult(case.name, error, len(report["regions"]), _region_calls(part),
                        report["offloaded_ops"], report["host_ops"], report["host_reasons"],
                        part)
