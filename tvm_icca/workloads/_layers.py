"""Building blocks shared by several families of the zoo (written with ``relax.frontend.nn``).

* :func:`self_attention` -- full-sequence multi-head attention (Vaswani et al. 2017, §3.2.2)
  of the encoders (BERT, ViT, DiT);
* :func:`decode_attention` -- attention of one new token per sequence over a KV cache plus the
  token itself, for LLM decoding (Llama 2, Gemma 2, OPT);
* :func:`causal_attention` / :func:`causal_mask` -- masked attention over a whole prompt, for
  LLM prefill and the training forward pass, with the mask built in the graph
  (:func:`causal_mask_sampler` computes the same values in numpy);
* :func:`rotary` / :func:`rope_sampler` -- rotary position embeddings (Su et al. 2021,
  RoFormer §3.4) in the "rotate half" form of the Hugging Face Llama/Gemma checkpoints.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op


def heads_first(x: Tensor, heads: int) -> Tensor:
    """``[b, s, heads*hd] -> [b, heads, s, hd]``."""
    b, s, d = x.shape
    return op.permute_dims(op.reshape(x, (b, s, heads, d // heads)), [0, 2, 1, 3])


def heads_last(x: Tensor) -> Tensor:
    """``[b, heads, s, hd] -> [b, s, heads*hd]``."""
    b, h, s, hd = x.shape
    return op.reshape(op.permute_dims(x, [0, 2, 1, 3]), (b, s, h * hd))


def transpose_last(x: Tensor) -> Tensor:
    """Swap the last two axes: feeds a matmul as its transposed right operand (``A @ B^T``),
    which the ICCA partitioner fuses into the matmul (pattern ``icca.matmul_transposed``)."""
    axes = list(range(x.ndim - 2)) + [x.ndim - 1, x.ndim - 2]
    return op.permute_dims(x, axes)


def self_attention(q: Tensor, k: Tensor, v: Tensor, heads: int) -> Tensor:
    """``softmax(Q K^T / sqrt(d_k)) V`` per head (Vaswani et al. 2017, Eq. 1), ``[b, s, d]``
    in and out. No mask: encoders here see full, unpadded sequences."""
    hd = q.shape[-1] // heads
    qh, kh, vh = heads_first(q, heads), heads_first(k, heads), heads_first(v, heads)
    scores = op.matmul(qh, transpose_last(kh)) * (1.0 / math.sqrt(hd))
    return heads_last(op.matmul(op.softmax(scores, axis=-1), vh))


def decode_attention(
    q: Tensor,
    k_new: Tensor,
    v_new: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    softcap: float | None = None,
) -> Tensor:
    """Attention of the new token over ``[cache; new token]``, without concatenating the cache.

    Shapes: ``q`` is ``[b, kv_heads, g, hd]`` (the ``g = heads / kv_heads`` query heads that
    share a KV head, already scaled), ``k_new``/``v_new`` are ``[b, kv_heads, 1, hd]``, the
    caches ``[b, kv_heads, context, hd]``. Grouping the query heads of a KV head as the rows of
    one matmul is how grouped-query attention (Ainslie et al. 2023) reads each cache entry
    once instead of repeating it ``g`` times; ``g = 1`` is plain multi-head attention.

    The softmax over the ``context + 1`` keys is computed in two blocks (cache, new token)
    with a shared running maximum, as split-KV decode kernels do (FlashDecoding, Dao et al.
    2023; online softmax, Milakov & Gimelshein 2018). It is exactly ``softmax([s_c, s_n]) @
    [V_c; v_n]``, but the cache is read in place: appending the new token with a ``concat``
    would copy the whole cache every step, and would leave the cache -- by far the largest
    tensor of decode -- to an op the chip does not offload.

    ``softcap`` is Gemma 2's attention logit soft-capping ``cap * tanh(s / cap)``.
    """

    def cap(s: Tensor) -> Tensor:
        return s if softcap is None else op.tanh(s * (1.0 / softcap)) * softcap

    s_cache = cap(op.matmul(q, transpose_last(k_cache)))  # [b, kvh, g, context]
    s_new = cap(op.matmul(q, transpose_last(k_new)))  # [b, kvh, g, 1]
    m = op.maximum(op.max(s_cache, axis=-1, keepdims=True), s_new)
    e_cache = op.exp(s_cache - m)
    e_new = op.exp(s_new - m)
    denom = op.sum(e_cache, axis=-1, keepdims=True) + e_new
    return (op.matmul(e_cache, v_cache) + e_new * v_new) / denom


def causal_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor,
                     softcap: float | None = None) -> Tensor:
    """``softmax(Q K^T + M) V`` over a whole sequence, ``M`` the additive causal mask.

    ``q`` is ``[..., s, hd]`` (already scaled), ``k`` and ``v`` are ``[..., s, hd]`` with
    leading axes that broadcast against ``q``'s (grouped-query attention passes ``q`` as
    ``[b, kv_heads, g, s, hd]`` and ``k``/``v`` as ``[b, kv_heads, 1, s, hd]``, so that each
    key and value is read once for its ``g`` query heads instead of being repeated), and
    ``mask`` is ``[s, s]``: 0 where query ``i`` may see key ``j`` (``j <= i``, and inside the
    window of a sliding-window layer), a large negative number elsewhere. Adding the mask to
    the scores before the softmax is how the Hugging Face models apply it; the scores of the
    ``s x s`` matrix above the diagonal are computed and then masked, as in every non-fused
    implementation (Vaswani et al. 2017, §3.2.3).

    ``softcap`` is Gemma 2's logit soft-capping, applied before the mask as in the reference.
    """
    scores = op.matmul(q, transpose_last(k))
    if softcap is not None:
        scores = op.tanh(scores * (1.0 / softcap)) * softcap
    return op.matmul(op.softmax(scores + mask, axis=-1), v)


def causal_mask(seq_len: int, dtype: str, window: int | None = None) -> Tensor:
    """The ``[seq_len, seq_len]`` additive mask of :func:`causal_attention`, computed in the
    graph from the positions as Hugging Face's models build it (``arange``, comparisons,
    ``where``), with the values of :func:`causal_mask_sampler`.

    Only ``arange``, views, integer comparisons and a ``where`` between two scalars: nothing
    TVM's ``FoldConstant`` folds into an ``[S, S]`` constant (``full`` of that shape would be),
    and what the ICCA partitioner reads as a predicate on the axis values
    (:mod:`tvm_icca.ops.masks`), so the fused attention takes no mask tensor.
    """
    pos = op.arange(0, seq_len, dtype="int32")
    rows, cols = op.reshape(pos, (seq_len, 1)), op.reshape(pos, (1, seq_len))
    fill = Tensor.from_scalar(float(np.finfo(dtype).min / 2), dtype)
    mask = op.where(op.less_equal(cols, rows), Tensor.from_scalar(0.0, dtype), fill)  # j <= i
    if window is not None:  # and i - j < window
        mask = op.where(op.less(rows - cols, Tensor.from_scalar(window, "int32")), mask, fill)
    return mask


def causal_mask_sampler(seq_len: int, dtype: str, window: int | None = None
                        ) -> Callable[[np.random.Generator], np.ndarray]:
    """The ``[seq_len, seq_len]`` additive mask of :func:`causal_attention`, in numpy (the
    reference of :func:`causal_mask`).

    Query ``i`` sees key ``j`` when ``j <= i`` and, with a ``window`` (Gemma 2's local
    layers), ``i - j < window``: the window counts the query's own token, like the
    ``window - 1`` cached tokens plus the new one of a decode step. Masked entries hold half
    the dtype's lowest value, so that adding a score never overflows to ``-inf``.
    """

    def sample(_: np.random.Generator) -> np.ndarray:
        i = np.arange(seq_len)
        visible = i[None, :] <= i[:, None]
        if window is not None:
            visible &= i[:, None] - i[None, :] < window
        return np.where(visible, 0.0, np.finfo(dtype).min / 2).astype(dtype)

    return sample


def rotate_half(x: Tensor) -> Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last axis (the Hugging Face form of RoPE)."""
    x1, x2 = op.split(x, 2, axis=-1)
    return op.concat([op.negative(x2), x1], dim=-1)


def rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE (Su et al. 2021, Eq. 34): ``x * cos + rotate_half(x) * sin``.

    Meta's reference code rotates interleaved pairs as complex numbers; the Hugging Face
    checkpoints permute the rows of ``W_q``/``W_k`` so that rotating halves is the same map.
    """
    return x * cos + rotate_half(x) * sin


def rope_sampler(
    batch: int, positions: Sequence[int], head_dim: int, theta: float, which: str
) -> Callable[[np.random.Generator], np.ndarray]:
    """The ``[batch, len(positions), 1, head_dim]`` cos or sin table of the tokens at
    ``positions`` (one position for a decode step, ``0 .. s-1`` for a prompt).

    The host computes it per step, like the position input of TVM's own nn LLMs; every
    sequence of the batch is at the same positions here (Elk §6.1: fixed context). The
    unit axis broadcasts over the heads of ``[b, s, heads, head_dim]``.
    """

    def sample(_: np.random.Generator) -> np.ndarray:
        inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        angles = np.asarray(positions, dtype=np.float64)[:, None] * np.concatenate([inv_freq, inv_freq])
        table = np.cos(angles) if which == "cos" else np.sin(angles)
        return np.broadcast_to(table[None, :, None, :], (batch, len(positions), 1, head_dim)).copy()

    return sample


def token_sampler(shape: tuple[int, ...], vocab: int) -> Callable[[np.random.Generator], np.ndarray]:
    """Random token ids in ``[0, vocab)``."""

    def sample(rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, vocab, size=shape)

    return sample


class Mlp(nn.Module):
    """Two linear layers with an activation in between (the transformer FFN)."""

    def __init__(self, dim: int, hidden: int, act: Callable[[Tensor], Tensor], dtype: str,
                 names: tuple[str, str] = ("fc1", "fc2")):
        self.names = names
        setattr(self, names[0], nn.Linear(dim, hidden, bias=True, dtype=dtype))
        setattr(self, names[1], nn.Linear(hidden, dim, bias=True, dtype=dtype))
        self.act = act

    def forward(self, x: Tensor) -> Tensor:
        return getattr(self, self.names[1])(self.act(getattr(self, self.names[0])(x)))


def gelu(x: Tensor) -> Tensor:
    """Exact (erf) GELU (Hendrycks & Gimpel 2016), as in BERT and ViT."""
    return op.gelu(x)


def gelu_tanh(x: Tensor) -> Tensor:
    """The tanh approximation of GELU, as in DiT (timm ``GELU(approximate="tanh")``) and Gemma."""
    return op.gelu(x, approximate="tanh")
