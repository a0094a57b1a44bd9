"""Attention as PyTorch's ONNX exporters write it, one block per export path.

Each builder writes the attention of one architecture and export path with ``onnx.helper``
(queries, keys and values as graph inputs, tiny sizes, random values), at the op patterns the
exporters emit:

* Hugging Face "eager" attention (Llama, Gemma 2, Whisper, T5, BERT) through
  ``torch.onnx.export``: ``MatMul(q, Transpose(k))``, the scale as ``Mul`` or ``Div``, the
  mask ``Add``-ed, ``softmax(..., dtype=float32)`` as ``Cast`` + ``Softmax`` and
  ``.to(query.dtype)`` as a second ``Cast``; grouped-query attention's ``repeat_kv`` as
  ``Unsqueeze`` + ``Expand`` + ``Reshape``; Gemma 2's soft-cap as ``Div``, ``Tanh``, ``Mul``;
* ``F.scaled_dot_product_attention`` decomposed by the TorchScript exporter's opset-14
  symbolic and by the dynamo exporter's torchlib: both operands scaled by ``Sqrt(scale)``,
  a boolean mask turned additive with ``Where(mask, 0, -inf)``, the scale computed from
  ``Shape(q)`` in the dynamo form.

:data:`FUSED` are the blocks the partitioner fuses into one ``icca.attention`` operator;
:data:`UNFUSED` those it must leave as separate operators (the softmax not over the keys, an
op between the scores and the softmax that is not elementwise, the probabilities returned as
well, a mask that broadcasts the scores up). :data:`BANDED` are blocks whose mask is a causal
or sliding-window band that no input computes (an initializer, or a chain of shape-only ops):
the fused operator must read it as a predicate on the axes (:mod:`tvm_icca.ops.masks`);
:data:`NOT_BANDED` look like them but are not bands and keep their mask tensor. The reference
is ``onnx.reference``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from onnx import TensorProto

from tvm_icca.testing.export_corpus import ExportCase
from tvm_icca.testing.export_corpus import GraphBuilder as Graph

__all__ = ["BANDED", "FUSED", "NOT_BANDED", "UNFUSED", "Dims"]


@dataclass(frozen=True)
class Dims:
    """The sizes of a block: batch, query heads, tokens (keys), head dimension."""

    batch: int = 2
    heads: int = 2
    tokens: int = 8
    head_dim: int = 16


#: float32's lowest value, the fill Hugging Face's causal masks use.
_LOWEST = float(np.finfo(np.float32).min)


def _inputs(g: Graph, shapes: dict[str, tuple[tuple[int, ...], int]]) -> dict[str, np.ndarray]:
    values = {}
    for name, (shape, elem) in shapes.items():
        if elem == TensorProto.BOOL:
            causal = np.tril(np.ones((shape[-2], shape[-1]), bool))
            values[name] = np.broadcast_to(causal, shape).copy()
        elif name.endswith("mask"):
            causal = np.triu(np.full((shape[-2], shape[-1]), np.finfo(np.float32).min), 1)
            values[name] = np.broadcast_to(causal, shape).astype(np.float32)
        else:
            dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
            values[name] = g.rng.standard_normal(shape).astype(dtype)
    return values


def _case(g: Graph, name: str, shapes: dict, out: str | dict[str, str], what: str) -> ExportCase:
    outputs = {"output": out} if isinstance(out, str) else out
    model = g.model(name, shapes, outputs)
    return ExportCase(name, model, _inputs(g, shapes), what)


def _qkv(z: Dims, elem: int = TensorProto.FLOAT, q_len: int | None = None,
         kv_heads: int | None = None) -> dict[str, tuple[tuple[int, ...], int]]:
    q_len = z.tokens if q_len is None else q_len
    kv_heads = z.heads if kv_heads is None else kv_heads
    return {"q": ((z.batch, z.heads, q_len, z.head_dim), elem),
            "k": ((z.batch, kv_heads, z.tokens, z.head_dim), elem),
            "v": ((z.batch, kv_heads, z.tokens, z.head_dim), elem)}


def _kt(g: Graph, k: str) -> str:
    return g.op("Transpose", [k], perm=[0, 1, 3, 2])


def hf_eager_llama(z: Dims = Dims()) -> ExportCase:
    """Llama's eager attention in float32: ``* scaling``, the causal mask added, the
    float32 softmax's ``Cast`` on either side (no-ops in float32, written all the same)."""
    g = Graph(11)
    scale = g.constant(1 / math.sqrt(z.head_dim))
    scores = g.op("Mul", [g.op("MatMul", ["q", _kt(g, "k")]), scale])
    scores = g.op("Cast", [g.op("Add", [scores, "causal_mask"])], to=TensorProto.FLOAT)
    probs = g.op("Cast", [g.op("Softmax", [scores], axis=-1)], to=TensorProto.FLOAT)
    shapes = {**_qkv(z), "causal_mask": ((z.batch, 1, z.tokens, z.tokens), TensorProto.FLOAT)}
    return _case(g, "hf_eager_llama", shapes, g.op("MatMul", [probs, "v"]),
                 "HF Llama eager attention, float32")


def hf_eager_llama_fp16(z: Dims = Dims()) -> ExportCase:
    """The same in float16: scores, mask and product in float16, the softmax upcast to
    float32 and cast back."""
    g = Graph(12)
    scores = g.op("Mul", [g.op("MatMul", ["q", _kt(g, "k")]),
                          g.constant(1 / math.sqrt(z.head_dim), np.float16)])
    scores = g.op("Cast", [g.op("Add", [scores, "causal_mask"])], to=TensorProto.FLOAT)
    probs = g.op("Cast", [g.op("Softmax", [scores], axis=-1)], to=TensorProto.FLOAT16)
    shapes = {**_qkv(z, TensorProto.FLOAT16),
              "causal_mask": ((z.batch, 1, z.tokens, z.tokens), TensorProto.FLOAT16)}
    case = _case(g, "hf_eager_llama_fp16", shapes, g.op("MatMul", [probs, "v"]),
                 "HF Llama eager attention, float16")
    # float16's lowest value: the mask of a float16 model
    case.inputs["causal_mask"] = np.triu(np.full((z.tokens, z.tokens), np.finfo(np.float16).min), 1)[
        None, None].repeat(z.batch, 0).astype(np.float16)
    return case


def hf_eager_llama_torchscript(z: Dims = Dims()) -> ExportCase:
    """Llama's eager attention in float32 as torch 2.13's TorchScript exporter writes it:
    the causal mask ``Trilu(upper, k=1)`` of a constant filled with float32's lowest value,
    unsqueezed to ``[1, 1, S, S]`` and added after ``/ sqrt(d)``; the ``Softmax`` followed by
    two ``Cast`` nodes (``softmax(..., dtype=float32)``, then ``.to(query.dtype)``)."""
    g = Graph(14)
    full = g.constant(np.full((z.tokens, z.tokens), _LOWEST, np.float32))
    mask = g.op("Trilu", [full, g.constant(1, np.int64)], upper=1)
    for axis in (0, 0):
        mask = g.op("Unsqueeze", [mask, g.constant([axis], np.int64)])
    scores = g.op("Div", [g.op("MatMul", ["q", _kt(g, "k")]), g.constant(math.sqrt(z.head_dim))])
    probs = g.op("Softmax", [g.op("Add", [scores, mask])], axis=-1)
    for _ in range(2):
        probs = g.op("Cast", [probs], to=TensorProto.FLOAT)
    return _case(g, "hf_eager_llama_torchscript", _qkv(z), g.op("MatMul", [probs, "v"]),
                 "HF Llama eager attention, float32, torch.onnx.export(dynamo=False)")


def hf_gqa_repeat_kv(z: Dims = Dims()) -> ExportCase:
    """Grouped-query attention: one KV head repeated for two query heads by ``repeat_kv``
    (``Unsqueeze``, ``Expand``, ``Reshape``), then eager attention with ``/ sqrt(d)``."""
    g = Graph(13)

    def repeat(x: str) -> str:
        wide = g.op("Expand", [g.op("Unsqueeze", [x, g.constant([2], np.int64)]),
                               g.constant([z.batch, 1, z.heads, z.tokens, z.head_dim], np.int64)])
        return g.op("Reshape", [wide, g.constant([z.batch, z.heads, z.tokens, z.head_dim], np.int64)])

    scores = g.op("Div", [g.op("MatMul", ["q", _kt(g, repeat("k"))]),
                          g.constant(math.sqrt(z.head_dim))])
    probs = g.op("Softmax", [g.op("Add", [scores, "causal_mask"])], axis=-1)
    shapes = {**_qkv(z, kv_heads=1), "causal_mask": ((1, 1, z.tokens, z.tokens), TensorProto.FLOAT)}
    return _case(g, "hf_gqa_repeat_kv", shapes, g.op("MatMul", [probs, repeat("v")]),
                 "HF grouped-query attention with repeat_kv")


def hf_gemma2_softcap(z: Dims = Dims()) -> ExportCase:
    """Gemma 2: scaled scores soft-capped ``c * tanh(s / c)`` before the mask."""
    g = Graph(14)
    cap = 50.0
    scores = g.op("Mul", [g.op("MatMul", ["q", _kt(g, "k")]), g.constant(z.head_dim ** -0.5)])
    capped = g.op("Mul", [g.op("Tanh", [g.op("Div", [scores, g.constant(cap)])]), g.constant(cap)])
    probs = g.op("Softmax", [g.op("Add", [capped, "sliding_mask"])], axis=-1)
    shapes = {**_qkv(z), "sliding_mask": ((z.batch, 1, z.tokens, z.tokens), TensorProto.FLOAT)}
    case = _case(g, "hf_gemma2_softcap", shapes, g.op("MatMul", [probs, "v"]),
                 "Gemma 2 attention with logit soft-capping")
    i = np.arange(z.tokens)
    visible = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < 4)  # a window of 4
    case.inputs["sliding_mask"] = np.where(visible, 0.0, np.finfo(np.float32).min).astype(
        np.float32)[None, None].repeat(z.batch, 0)
    return case


def hf_t5(z: Dims = Dims()) -> ExportCase:
    """T5: no scale, the position bias (relative positions and the mask) added, the
    float32 softmax cast back to the scores' type."""
    g = Graph(15)
    scores = g.op("Add", [g.op("MatMul", ["q", _kt(g, "k")]), "position_bias"])
    probs = g.op("Cast", [g.op("Softmax", [g.op("Cast", [scores], to=TensorProto.FLOAT)],
                               axis=-1)], to=TensorProto.FLOAT)
    shapes = {**_qkv(z), "position_bias": ((1, z.heads, z.tokens, z.tokens), TensorProto.FLOAT)}
    return _case(g, "hf_t5", shapes, g.op("MatMul", [probs, "v"]), "T5 attention")


def hf_whisper_cross(z: Dims = Dims()) -> ExportCase:
    """Whisper's decoder cross-attention: the queries scaled by ``d ** -0.5`` where they
    are projected, 4 decoder tokens over 8 encoder frames, no mask."""
    g = Graph(16)
    q = g.op("Mul", ["q", g.constant(z.head_dim ** -0.5)])
    probs = g.op("Softmax", [g.op("MatMul", [q, _kt(g, "k")])], axis=-1)
    return _case(g, "hf_whisper_cross", _qkv(z, q_len=z.tokens // 2),
                 g.op("MatMul", [probs, "v"]), "Whisper decoder cross-attention")


def sdpa_torchscript(z: Dims = Dims()) -> ExportCase:
    """``F.scaled_dot_product_attention`` with a boolean mask, as the TorchScript
    exporter's opset-14 symbolic decomposes it: ``Sqrt(scale)`` on both operands, the mask
    made additive with ``Where(mask, 0, -inf)``."""
    g = Graph(17)
    root = g.op("Sqrt", [g.constant(1 / math.sqrt(z.head_dim))])
    q = g.op("Mul", ["q", root])
    kt = g.op("Mul", [_kt(g, "k"), root])
    additive = g.op("Where", ["attn_mask", g.constant(0.0), g.constant(-np.inf)])
    probs = g.op("Softmax", [g.op("Add", [g.op("MatMul", [q, kt]), additive])], axis=-1)
    shapes = {**_qkv(z), "attn_mask": ((z.batch, 1, z.tokens, z.tokens), TensorProto.BOOL)}
    return _case(g, "sdpa_torchscript", shapes, g.op("MatMul", [probs, "v"]),
                 "SDPA, TorchScript exporter (opset 14 symbolic)")


def sdpa_dynamo(z: Dims = Dims()) -> ExportCase:
    """The same as the dynamo exporter's torchlib writes it: the scale ``1 / sqrt(E)`` from
    ``Shape(q)``, an additive float mask."""
    g = Graph(18)
    e = g.op("Cast", [g.op("Slice", [g.op("Shape", ["q"]), g.constant([-1], np.int64),
                                     g.constant([2 ** 62], np.int64)])], to=TensorProto.FLOAT)
    scale = g.op("Div", [g.constant(1.0), g.op("Sqrt", [e])])
    root = g.op("Sqrt", [scale])
    q = g.op("Mul", ["q", root])
    kt = g.op("Mul", [_kt(g, "k"), root])
    probs = g.op("Softmax", [g.op("Add", [g.op("MatMul", [q, kt]), "attn_mask"])], axis=-1)
    shapes = {**_qkv(z), "attn_mask": ((z.batch, 1, z.tokens, z.tokens), TensorProto.FLOAT)}
    return _case(g, "sdpa_dynamo", shapes, g.op("MatMul", [probs, "v"]),
                 "SDPA, dynamo exporter (torchlib)")


# -- what must stay unfused -----------------------------------------------------------------
def softmax_over_queries(z: Dims = Dims()) -> ExportCase:
    """The softmax normalizes over the queries (axis 2), not the keys."""
    g = Graph(21)
    probs = g.op("Softmax", [g.op("MatMul", ["q", _kt(g, "k")])], axis=2)
    return _case(g, "softmax_over_queries", _qkv(z), g.op("MatMul", [probs, "v"]),
                 "softmax over the query axis")


def transposed_scores(z: Dims = Dims()) -> ExportCase:
    """A transpose (not elementwise) between the scores and the softmax."""
    g = Graph(22)
    scores = g.op("Transpose", [g.op("MatMul", ["q", _kt(g, "k")])], perm=[0, 1, 3, 2])
    probs = g.op("Softmax", [scores], axis=-1)
    return _case(g, "transposed_scores", _qkv(z), g.op("MatMul", [probs, "v"]),
                 "scores transposed before the softmax")


def probabilities_returned(z: Dims = Dims()) -> ExportCase:
    """``output_attentions=True``: the probabilities are an output of the model as well."""
    g = Graph(23)
    probs = g.op("Softmax", [g.op("MatMul", ["q", _kt(g, "k")])], axis=-1)
    return _case(g, "probabilities_returned", _qkv(z),
                 {"output": g.op("MatMul", [probs, "v"]), "attentions": probs},
                 "attention probabilities returned")


def mask_broadcasts_scores(z: Dims = Dims()) -> ExportCase:
    """Scores of one batch row plus a per-batch mask: the add broadcasts the scores up."""
    g = Graph(24)
    probs = g.op("Softmax", [g.op("Add", [g.op("MatMul", ["q", _kt(g, "k")]), "causal_mask"])],
                 axis=-1)
    one = (1, z.heads, z.tokens, z.head_dim)
    shapes = {"q": (one, TensorProto.FLOAT), "k": (one, TensorProto.FLOAT),
              "v": ((z.batch, z.heads, z.tokens, z.head_dim), TensorProto.FLOAT),
              "causal_mask": ((z.batch, 1, z.tokens, z.tokens), TensorProto.FLOAT)}
    return _case(g, "mask_broadcasts_scores", shapes, g.op("MatMul", [probs, "v"]),
                 "a mask that broadcasts the scores up")


#: Exporter-shaped attention blocks that fuse into one operator, by name.
FUSED: dict[str, Callable[[], ExportCase]] = {f.__name__: f for f in (
    hf_eager_llama, hf_eager_llama_fp16, hf_eager_llama_torchscript, hf_gqa_repeat_kv, hf_gemma2_softcap, hf_t5,
    hf_whisper_cross, sdpa_torchscript, sdpa_dynamo)}
#: Blocks that look like attention but are not ``softmax(score) @ V``, by name.
UNFUSED: dict[str, Callable[[], ExportCase]] = {f.__name__: f for f in (
    softmax_over_queries, transposed_scores, probabilities_returned, mask_broadcasts_scores)}


# -- masks that are a band of the axes, and look-alikes that are not ------------------------


def _masked_eager(g: Graph, z: Dims, mask: str, name: str, what: str) -> ExportCase:
    """Llama's eager attention (``* scaling``, ``+ mask``) with ``mask`` a node of ``g``."""
    scores = g.op("Mul", [g.op("MatMul", ["q", _kt(g, "k")]), g.constant(z.head_dim ** -0.5)])
    probs = g.op("Softmax", [g.op("Add", [scores, mask])], axis=-1)
    return _case(g, name, _qkv(z), g.op("MatMul", [probs, "v"]), what)


def _causal_values(z: Dims) -> np.ndarray:
    return np.triu(np.full((z.tokens, z.tokens), _LOWEST, np.float32), 1)[None, None]


def causal_initializer(z: Dims = Dims()) -> ExportCase:
    """``torch.onnx.export`` with constant folding: the causal mask an initializer
    ``[1, 1, S, S]``, ``float32``'s lowest value above the diagonal."""
    g = Graph(31)
    mask = g.init("causal_mask", _causal_values(z))
    return _masked_eager(g, z, mask, "causal_initializer", "causal mask as an initializer")


def _positions(g: Graph, z: Dims) -> tuple[str, str]:
    """``Range(0, S)`` as rows ``[S, 1]`` and columns ``[1, S]`` (``Unsqueeze``)."""
    pos = g.op("Range", [g.constant(0, np.int64), g.constant(z.tokens, np.int64),
                         g.constant(1, np.int64)])
    return (g.op("Unsqueeze", [pos, g.constant([1], np.int64)]),
            g.op("Unsqueeze", [pos, g.constant([0], np.int64)]))


def causal_dynamo_chain(z: Dims = Dims()) -> ExportCase:
    """The dynamo exporter's in-graph mask: ``Range``, a comparison of columns and rows,
    ``Where(visible, 0, lowest)``, expanded to ``[1, 1, S, S]``."""
    g = Graph(32)
    rows, cols = _positions(g, z)
    mask = g.op("Where", [g.op("LessOrEqual", [cols, rows]), g.constant(0.0), g.constant(_LOWEST)])
    mask = g.op("Expand", [mask, g.constant([1, 1, z.tokens, z.tokens], np.int64)])
    return _masked_eager(g, z, mask, "causal_dynamo_chain", "causal mask from Range/compare/Where")


def sliding_window_chain(z: Dims = Dims(), window: int = 3) -> ExportCase:
    """Gemma 2's local layers: visible when ``j <= i`` and ``i - j < window``, computed with
    ``Sub``, ``Less``, ``And`` and ``Where`` (half the lowest value, as the zoo writes it)."""
    g = Graph(33)
    rows, cols = _positions(g, z)
    visible = g.op("And", [g.op("LessOrEqual", [cols, rows]),
                           g.op("Less", [g.op("Sub", [rows, cols]), g.constant(window, np.int64)])])
    mask = g.op("Where", [visible, g.constant(0.0), g.constant(_LOWEST / 2)])
    return _masked_eager(g, z, mask, "sliding_window_chain", "sliding-window mask from a chain")


def perturbed_causal_initializer(z: Dims = Dims()) -> ExportCase:
    """A causal initializer with one visible entry masked: not a band."""
    g = Graph(34)
    values = _causal_values(z).copy()
    values[0, 0, z.tokens - 1, 1] = _LOWEST
    mask = g.init("causal_mask", values)
    return _masked_eager(g, z, mask, "perturbed_causal_initializer", "a causal mask with a hole")


def random_initializer(z: Dims = Dims()) -> ExportCase:
    """A constant additive bias of random values (a learned position bias): not a band."""
    g = Graph(35)
    mask = g.init("bias", g.rng.standard_normal((1, 1, z.tokens, z.tokens)).astype(np.float32))
    return _masked_eager(g, z, mask, "random_initializer", "a constant random bias")


#: Blocks whose mask is a causal or sliding-window band computed from no input, by name.
BANDED: dict[str, Callable[[], ExportCase]] = {f.__name__: f for f in (
    causal_initializer, causal_dynamo_chain, sliding_window_chain, hf_eager_llama_torchscript)}
#: Blocks with a constant mask that is not a band, by name.
NOT_BANDED: dict[str, Callable[[], ExportCase]] = {f.__name__: f for f in (
    perturbed_causal_initializer, random_initializer)}
