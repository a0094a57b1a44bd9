"""Decoder-only LLMs (Llama 2, Gemma 2, OPT): what the families share, for three phases.

``phase`` selects what one call of ``main`` computes (:data:`PHASES`):

* ``"decode"`` (the default; Elk §6.1, "inference decoding phase"): one new token per sequence
  against every layer's KV cache of ``context`` earlier tokens; returns the next-token logits
  plus the new token's key and value of every layer (which the serving runtime appends to the
  caches). Each layer's caches are ``nn.Parameter``\\ s of shape
  ``[batch, kv_heads, context, head_dim]`` named ``...k_cache`` / ``...v_cache``: like weights
  they become parameters of ``main`` after the activations, and like weights they are
  read-only model state resident in HBM during the step (:class:`~tvm_icca.workloads.TensorSpec`
  kind ``kv_cache``).
* ``"prefill"``: the whole prompt of ``seq_len`` tokens per sequence through every layer, with
  causal self-attention over the prompt (:func:`~tvm_icca.workloads._layers.causal_attention`:
  ``Q K^T`` over ``seq_len x seq_len`` plus the causal mask, softmax, ``V``). There is no KV
  cache to read; the prompt's keys and values of every layer are *returned* in the cache layout
  ``[batch, kv_heads, seq_len, head_dim]`` (the cache the following decode steps read, which
  the serving runtime stores), with the logits of the last position only (the first generated
  token; a serving engine computes no others).
* ``"train"``: the forward pass of training (Elk §6.4, Fig. 24) over ``batch x seq_len``
  tokens. It is the prefill computation -- the same layers, causal attention and masks --
  without keys and values to keep and with the logits of *every* position (what the loss
  reads). The backward pass is not modelled (Elk reports the forward pass; "the backward pass
  has similar trends").

Prefill and training take the rotary tables as inputs computed by the host, like the rotary
tables of decode: ``rope_cos``/``rope_sin`` ``[batch, seq_len, 1, head_dim]`` for positions
``0 .. seq_len-1``, or OPT's ``position_ids``. The masks -- the causal one ``[seq_len,
seq_len]``, and for Gemma 2's local layers the sliding-window one when the prompt is longer than
their window -- are computed in the graph from the positions, as the Hugging Face models build
them (:func:`prefill_masks`, :func:`~tvm_icca.workloads._layers.causal_mask`): no host input,
and the ICCA compiler reads them as predicates on the attention's axes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from runtime_sim.contract.errors import InvalidWorkloadError
from tvm_icca.workloads._common import (
    TensorSpec,
    Workload,
    default_dtype,
    export_workload,
)
from tvm_icca.workloads._layers import (
    causal_attention,
    causal_mask,
    decode_attention,
    heads_last,
    rope_sampler,
    rotary,
    token_sampler,
)

#: What one call of ``main`` computes (see the module docstring); ``"decode"`` is the default.
PHASES = ("decode", "prefill", "train")


@dataclass(frozen=True)
class DecoderConfig:
    """Hyper-parameters of a decoder-only LLM (the fields of its Hugging Face config.json)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    head_dim: int | None = None  # hidden // heads unless given (Gemma 2 27B: 128 != 4608/32)
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_positions: int = 4096
    sliding_window: int | None = None  # on even layers (Gemma 2)
    attn_softcap: float | None = None
    final_softcap: float | None = None
    query_scale: float | None = None  # multiplies q; default head_dim ** -0.5
    #: positions are a learned table of ``max_positions`` rows (OPT), not rotary: a prompt
    #: cannot be longer. Rotary models take longer prompts (the host computes their tables
    #: for any position), as long-context fine-tunes of them do.
    learned_positions: bool = False

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def tiny(self) -> "DecoderConfig":
        """A small config of the same architecture (GQA stays GQA) for functional tests."""
        return replace(
            self, hidden=64, layers=2, heads=4, kv_heads=4 if self.kv_heads == self.heads else 2,
            ffn=96, vocab=128, head_dim=16 if self.head_dim else None,
            sliding_window=8 if self.sliding_window else None,
            query_scale=(1 / 4) if self.query_scale else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def add_projections(module: nn.Module, cfg: DecoderConfig, names: tuple[str, str, str, str],
                    bias: bool, dtype: str) -> None:
    """The Q, K, V and output projections of an attention block, as attributes ``names``:
    one definition for decode and prefill, so both phases of a model have the same weights."""
    hd = cfg.hd
    for name, (n_in, n_out) in zip(names, [(cfg.hidden, cfg.heads * hd),
                                           (cfg.hidden, cfg.kv_heads * hd),
                                           (cfg.hidden, cfg.kv_heads * hd),
                                           (cfg.heads * hd, cfg.hidden)]):
        setattr(module, name, nn.Linear(n_in, n_out, bias=bias, dtype=dtype))


class DecodeAttention(nn.Module):
    """Self-attention of the new token; rotary or not, biases or not, GQA or not."""

    def __init__(self, cfg: DecoderConfig, batch: int, context: int, dtype: str, *,
                 bias: bool, use_rotary: bool, names: tuple[str, str, str, str]):
        self.cfg, self.batch, self.use_rotary, self.names = cfg, batch, use_rotary, names
        hd = cfg.hd
        add_projections(self, cfg, names, bias, dtype)
        self.k_cache = nn.Parameter((batch, cfg.kv_heads, context, hd), dtype)
        self.v_cache = nn.Parameter((batch, cfg.kv_heads, context, hd), dtype)

    def forward(self, x: Tensor, cos: Tensor | None, sin: Tensor | None,
                mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        del mask  # one token attends to its whole cache: nothing to mask
        cfg, b, hd = self.cfg, self.batch, self.cfg.hd
        q_proj, k_proj, v_proj, o_proj = (getattr(self, n) for n in self.names)
        g = cfg.heads // cfg.kv_heads
        # With one token per sequence, [b, 1, heads*hd] -> [b, heads, 1, hd] is a reshape (no
        # transpose); query heads sharing a KV head are contiguous (HF repeat_kv order).
        q = op.reshape(q_proj(x), (b, cfg.kv_heads, g, hd))
        k = op.reshape(k_proj(x), (b, cfg.kv_heads, 1, hd))
        v = op.reshape(v_proj(x), (b, cfg.kv_heads, 1, hd))
        if self.use_rotary:
            q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        scale = cfg.query_scale if cfg.query_scale is not None else hd ** -0.5
        o = decode_attention(q * scale, k, v, self.k_cache, self.v_cache, cfg.attn_softcap)
        return o_proj(op.reshape(o, (b, 1, cfg.heads * hd))), k, v


class PrefillAttention(nn.Module):
    """Causal self-attention over the whole sequence (prefill and the training forward), with
    the same projections (names, biases, rotary, GQA) as :class:`DecodeAttention`."""

    def __init__(self, cfg: DecoderConfig, batch: int, seq_len: int, dtype: str, *,
                 bias: bool, use_rotary: bool, names: tuple[str, str, str, str]):
        self.cfg, self.batch, self.seq_len, self.use_rotary, self.names = (
            cfg, batch, seq_len, use_rotary, names)
        add_projections(self, cfg, names, bias, dtype)

    def forward(self, x: Tensor, cos: Tensor | None, sin: Tensor | None,
                mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        cfg, b, s, hd = self.cfg, self.batch, self.seq_len, self.cfg.hd
        q_proj, k_proj, v_proj, o_proj = (getattr(self, n) for n in self.names)
        kvh, g = cfg.kv_heads, cfg.heads // cfg.kv_heads
        q = op.reshape(q_proj(x), (b, s, cfg.heads, hd))
        k = op.reshape(k_proj(x), (b, s, kvh, hd))
        v = op.reshape(v_proj(x), (b, s, kvh, hd))
        if self.use_rotary:  # tables [b, s, 1, hd] broadcast over the heads
            q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        scale = cfg.query_scale if cfg.query_scale is not None else hd ** -0.5
        q = q * scale
        # keys and values in the cache layout [b, kv_heads, s, hd]: what prefill returns
        k, v = op.permute_dims(k, [0, 2, 1, 3]), op.permute_dims(v, [0, 2, 1, 3])
        if g == 1:
            o = causal_attention(op.permute_dims(q, [0, 2, 1, 3]), k, v, mask, cfg.attn_softcap)
        else:
            # GQA: the g query heads of a KV head (contiguous, HF repeat_kv order) share its
            # keys and values through a broadcast batch axis instead of repeating them.
            qg = op.permute_dims(op.reshape(q, (b, s, kvh, g, hd)), [0, 2, 3, 1, 4])
            o = causal_attention(qg, op.unsqueeze(k, 2), op.unsqueeze(v, 2), mask, cfg.attn_softcap)
            o = op.reshape(o, (b, cfg.heads, s, hd))
        return o_proj(heads_last(o)), k, v


def attention_class(phase: str) -> type[nn.Module]:
    """The attention module of a phase: :class:`DecodeAttention` or :class:`PrefillAttention`."""
    return DecodeAttention if phase == "decode" else PrefillAttention


def model_outputs(phase: str, h: Tensor, kv: list[Tensor],
                  logits: Callable[[Tensor], Tensor]) -> Tensor | tuple[Tensor, ...]:
    """What ``main`` returns in ``phase`` from the last hidden states ``h`` ``[b, s, d]``,
    every layer's keys and values ``kv`` and the final norm + LM head ``logits``: decode
    ``(logits, k0, v0, k1, ...)``; prefill the same with the logits of the last position
    only; train the logits of every position."""
    if phase == "train":
        return logits(h)
    if phase == "prefill" and h.shape[1] > 1:
        h = op.split(h, [h.shape[1] - 1], axis=1)[1]  # [b, 1, d]: the last position
    return (logits(h), *kv)


def layer_mask(cfg: DecoderConfig, layer: int, causal: Tensor | None,
               sliding: Tensor | None) -> Tensor | None:
    """The mask of layer ``layer``: the sliding-window one on Gemma 2's local (even) layers
    when the prompt is longer than the window, the causal one otherwise."""
    if sliding is not None and cfg.sliding_window is not None and layer % 2 == 0:
        return sliding
    return causal


def prefill_masks(cfg: DecoderConfig, phase: str, seq_len: int, dtype: str
                  ) -> tuple[Tensor | None, Tensor | None]:
    """The causal mask and (Gemma 2's local layers, prompts longer than the window) the
    sliding-window mask of prefill and training, built in the graph; ``(None, None)`` in
    decode, where one token attends to its whole cache."""
    if phase == "decode":
        return None, None
    sliding = (causal_mask(seq_len, dtype, cfg.sliding_window)
               if needs_sliding_mask(cfg, seq_len) else None)
    return causal_mask(seq_len, dtype), sliding


def cache_length(cfg: DecoderConfig, layer: int, context: int) -> int:
    """Cached tokens layer ``layer`` attends to: a sliding-window layer keeps the last
    ``window - 1`` (the new token is the window's last), the others all ``context``."""
    if cfg.sliding_window is not None and layer % 2 == 0:
        return min(context, cfg.sliding_window - 1)
    return context


def needs_sliding_mask(cfg: DecoderConfig, seq_len: int) -> bool:
    """Whether a prompt of ``seq_len`` tokens reaches past the local layers' window."""
    return cfg.sliding_window is not None and seq_len > cfg.sliding_window


def decoder_inputs(cfg: DecoderConfig, batch: int, context: int, rotary_inputs: bool,
                   position_offset: int = 0, phase: str = "decode", dtype: str = "float32"
                   ) -> list[TensorSpec]:
    """``input_ids`` and either the rotary tables or OPT's position ids (the masks of prefill
    and training are computed in the graph: :func:`prefill_masks`). ``context`` is the
    KV-cache length in decode, the sequence length otherwise."""
    if phase == "decode":
        tokens, positions = 1, [min(context, cfg.max_positions - 1)]
    else:
        tokens, positions = context, list(range(context))
    specs = [TensorSpec("input_ids", (batch, tokens), "int32", "input",
                        token_sampler((batch, tokens), cfg.vocab))]
    if rotary_inputs:
        for which in ("cos", "sin"):
            specs.append(TensorSpec(f"rope_{which}", (batch, tokens, 1, cfg.hd), "float32", "input",
                                    rope_sampler(batch, positions, cfg.hd, cfg.rope_theta, which)))
    else:
        ids = np.asarray(positions) + position_offset

        def sample(_rng: np.random.Generator) -> np.ndarray:
            return np.broadcast_to(ids, (batch, tokens)).copy()

        specs.append(TensorSpec("position_ids", (batch, tokens), "int32", "input", sample))
    return specs


def build_decoder(
    name: str,
    model_cls: Callable[..., nn.Module],
    cfg: DecoderConfig,
    *,
    batch: int,
    context: int | None,
    num_layers: int | None,
    tiny: bool,
    dtype: str | None,
    rotary_inputs: bool,
    description: str,
    position_offset: int = 0,
    phase: str = "decode",
    seq_len: int | None = None,
) -> Workload:
    """Instantiate ``model_cls(cfg, batch, length, dtype, phase)`` and export its ``phase``
    (``length``: ``context`` in decode, ``seq_len`` otherwise; both default to 2,048)."""
    length = resolve_length(name, phase, context, seq_len)
    if tiny:
        cfg = cfg.tiny()
    if num_layers is not None:
        cfg = replace(cfg, layers=int(num_layers))
    if phase != "decode" and cfg.learned_positions and length > cfg.max_positions:
        raise InvalidWorkloadError(
            f"{name}: seq_len={length:,} is longer than the model's {cfg.max_positions:,} positions")
    dtype = default_dtype(dtype, tiny)
    inputs = decoder_inputs(cfg, batch, length, rotary_inputs, position_offset, phase, dtype)
    # rotary tables follow the model dtype (the host computes them in float64 anyway)
    inputs = [replace(t, dtype=dtype) if t.name.startswith("rope_") else t for t in inputs]
    model = model_cls(cfg, batch, length, dtype, phase)
    sizes = {"context": length} if phase == "decode" else {"seq_len": length}
    config = {**cfg.to_dict(), "phase": phase, "batch": batch, **sizes, "dtype": dtype, "tiny": tiny}
    what, size = {"decode": ("decode step", f"context {length}"),
                  "prefill": ("prefill", f"prompt of {length} tokens"),
                  "train": ("training forward", f"sequence {length}")}[phase]
    return export_workload(name, model, inputs, config,
                           f"{name} {what} ({description}): batch {batch}, {size}")


def resolve_length(name: str, phase: str, context: int | None, seq_len: int | None) -> int:
    """The one length of a builder call: ``context`` (the KV-cache length) in decode,
    ``seq_len`` (the tokens of each sequence) in prefill and train; the other is refused."""
    if phase not in PHASES:
        raise InvalidWorkloadError(f"{name}: unknown phase {phase!r}; known: {', '.join(PHASES)}")
    if phase == "decode":
        if seq_len is not None:
            raise InvalidWorkloadError(
                f"{name}: a decode step takes context (the KV-cache length), not seq_len; "
                "pass phase='prefill' or 'train' for a whole sequence")
        return 2048 if context is None else context
    if context is not None:
        raise InvalidWorkloadError(
            f"{name}: phase={phase!r} takes seq_len (the tokens of each sequence), not context "
            "(the KV-cache length of a decode step)")
    return 2048 if seq_len is None else seq_len


def softcap(x: Tensor, cap: float | None) -> Tensor:
    """``cap * tanh(x / cap)`` (Gemma 2 logit soft-capping), identity when ``cap`` is None."""
    return x if cap is None else op.tanh(x * (1.0 / cap)) * cap


def check_heads(cfg: DecoderConfig) -> None:
    if cfg.heads % cfg.kv_heads:
        raise InvalidWorkloadError(f"heads ({cfg.heads}) must be a multiple of kv_heads ({cfg.kv_heads})")
    if cfg.hd % 2:
        raise InvalidWorkloadError(f"head_dim ({cfg.hd}) must be even for rotary embeddings")
