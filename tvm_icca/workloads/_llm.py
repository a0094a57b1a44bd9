"""The decode step of a decoder-only LLM: what Llama 2, Gemma 2 and OPT have in common.

One decode step (Elk §6.1, "inference decoding phase") takes one new token per sequence and
every layer's KV cache of ``context`` earlier tokens, and returns the next-token logits plus
the new token's key and value of every layer (which the serving runtime appends to the caches).

Each layer's caches are ``nn.Parameter``\\ s of shape ``[batch, kv_heads, context, head_dim]``
named ``...k_cache`` / ``...v_cache``: like weights they become parameters of ``main`` after
the activations, and like weights they are read-only model state resident in HBM during the
step (:class:`~tvm_icca.workloads.TensorSpec` kind ``kv_cache``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from runtime_sim.contract.errors import InvalidWorkloadError
from tvm_icca.workloads._common import TensorSpec, Workload, default_dtype, export_workload
from tvm_icca.workloads._layers import decode_attention, rope_sampler, rotary, token_sampler


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


class DecodeAttention(nn.Module):
    """Self-attention of the new token; rotary or not, biases or not, GQA or not."""

    def __init__(self, cfg: DecoderConfig, batch: int, context: int, dtype: str, *,
                 bias: bool, use_rotary: bool, names: tuple[str, str, str, str]):
        self.cfg, self.batch, self.use_rotary, self.names = cfg, batch, use_rotary, names
        hd = cfg.hd
        for name, (n_in, n_out) in zip(names, [(cfg.hidden, cfg.heads * hd),
                                               (cfg.hidden, cfg.kv_heads * hd),
                                               (cfg.hidden, cfg.kv_heads * hd),
                                               (cfg.heads * hd, cfg.hidden)]):
            setattr(self, name, nn.Linear(n_in, n_out, bias=bias, dtype=dtype))
        self.k_cache = nn.Parameter((batch, cfg.kv_heads, context, hd), dtype)
        self.v_cache = nn.Parameter((batch, cfg.kv_heads, context, hd), dtype)

    def forward(self, x: Tensor, cos: Tensor | None, sin: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
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


def cache_length(cfg: DecoderConfig, layer: int, context: int) -> int:
    """Cached tokens layer ``layer`` attends to: a sliding-window layer keeps the last
    ``window - 1`` (the new token is the window's last), the others all ``context``."""
    if cfg.sliding_window is not None and layer % 2 == 0:
        return min(context, cfg.sliding_window - 1)
    return context


def decoder_inputs(cfg: DecoderConfig, batch: int, context: int, rotary_inputs: bool,
                   position_offset: int = 0) -> list[TensorSpec]:
    """``input_ids`` and either the rotary tables or OPT's position ids."""
    specs = [TensorSpec("input_ids", (batch, 1), "int32", "input", token_sampler((batch, 1), cfg.vocab))]
    position = min(context, cfg.max_positions - 1)
    if rotary_inputs:
        for which in ("cos", "sin"):
            specs.append(TensorSpec(f"rope_{which}", (batch, 1, 1, cfg.hd), "float32", "input",
                                    rope_sampler(batch, position, cfg.hd, cfg.rope_theta, which)))
    else:
        ids = position + position_offset

        def sample(_rng: np.random.Generator) -> np.ndarray:
            return np.full((batch, 1), ids)

        specs.append(TensorSpec("position_ids", (batch, 1), "int32", "input", sample))
    return specs


def build_decoder(
    name: str,
    model_cls: Callable[..., nn.Module],
    cfg: DecoderConfig,
    *,
    batch: int,
    context: int,
    num_layers: int | None,
    tiny: bool,
    dtype: str | None,
    rotary_inputs: bool,
    description: str,
    position_offset: int = 0,
) -> Workload:
    """Instantiate ``model_cls(cfg, batch, context, dtype)`` and export its decode step."""
    if tiny:
        cfg = cfg.tiny()
    if num_layers is not None:
        cfg = replace(cfg, layers=int(num_layers))
    if batch < 1 or context < 1 or cfg.layers < 1:
        raise InvalidWorkloadError(f"{name}: batch, context and num_layers must be positive")
    dtype = default_dtype(dtype, tiny)
    inputs = decoder_inputs(cfg, batch, context, rotary_inputs, position_offset)
    # rotary tables follow the model dtype (the host computes them in float64 anyway)
    inputs = [replace(t, dtype=dtype) if t.name.startswith("rope_") else t for t in inputs]
    model = model_cls(cfg, batch, context, dtype)
    config = {**cfg.to_dict(), "batch": batch, "context": context, "dtype": dtype, "tiny": tiny}
    return export_workload(name, model, inputs, config, description)


def softcap(x: Tensor, cap: float | None) -> Tensor:
    """``cap * tanh(x / cap)`` (Gemma 2 logit soft-capping), identity when ``cap`` is None."""
    return x if cap is None else op.tanh(x * (1.0 / cap)) * cap


def check_heads(cfg: DecoderConfig) -> None:
    if cfg.heads % cfg.kv_heads:
        raise InvalidWorkloadError(f"heads ({cfg.heads}) must be a multiple of kv_heads ({cfg.kv_heads})")
    if cfg.hd % 2:
        raise InvalidWorkloadError(f"head_dim ({cfg.hd}) must be even for rotary embeddings")
