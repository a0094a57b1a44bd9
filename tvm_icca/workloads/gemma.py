"""Gemma 2 27B (Gemma Team 2024, arXiv:2408.00118): a decode step, a prefill or a training forward.

Architecture (paper §2, Table 1; Hugging Face ``modeling_gemma2``): RMSNorm both before and
after the attention and the MLP blocks ("pre-norm and post-norm", §2), grouped-query attention
(32 query heads, 16 KV heads, head_dim 128), rotary embeddings, GeGLU MLP
``down(gelu_tanh(gate(x)) * up(x))``, attention logits soft-capped at 50 and final logits at
30, query scaled by ``query_pre_attn_scalar ** -0.5 = 144 ** -0.5`` (d_model / heads for 27B),
token embeddings multiplied by ``sqrt(d_model)`` and tied to the LM head, local sliding-window
attention (4,096 tokens) on every other layer (even layer indices, as in the reference code).

Gemma's RMSNorm scales by ``1 + w``; we store the effective scale as the parameter (folded at
load time like a batch-norm into a convolution), so each norm is one ``rms_norm``.

Hyper-parameters: ``config.json`` of huggingface.co/google/gemma-2-27b (hidden 4608,
intermediate 36864, 46 layers, vocab 256000, rms_norm_eps 1e-6, rope_theta 10000).
"""

from __future__ import annotations

import math

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from tvm_icca.workloads._common import Workload, workload_builder
from tvm_icca.workloads._layers import gelu_tanh, transpose_last
from tvm_icca.workloads._llm import (
    DecoderConfig,
    attention_class,
    build_decoder,
    cache_length,
    check_heads,
    layer_mask,
    model_outputs,
    prefill_masks,
    softcap,
)

CONFIGS: dict[str, DecoderConfig] = {
    "gemma2-27b": DecoderConfig(
        hidden=4608, layers=46, heads=32, kv_heads=16, head_dim=128, ffn=36864, vocab=256000,
        norm_eps=1e-6, max_positions=8192, sliding_window=4096, attn_softcap=50.0,
        final_softcap=30.0, query_scale=144 ** -0.5,
    ),
}


class GemmaMLP(nn.Module):
    def __init__(self, cfg: DecoderConfig, dtype: str):
        self.gate_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(cfg.ffn, cfg.hidden, bias=False, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(gelu_tanh(self.gate_proj(x)) * self.up_proj(x))


class GemmaLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig, batch: int, length: int, dtype: str, phase: str):
        def norm() -> nn.RMSNorm:
            return nn.RMSNorm(cfg.hidden, -1, cfg.norm_eps, bias=False, dtype=dtype)

        self.input_layernorm = norm()
        self.self_attn = attention_class(phase)(cfg, batch, length, dtype, bias=False, use_rotary=True,
                                                names=("q_proj", "k_proj", "v_proj", "o_proj"))
        self.post_attention_layernorm = norm()
        self.pre_feedforward_layernorm = norm()
        self.mlp = GemmaMLP(cfg, dtype)
        self.post_feedforward_layernorm = norm()

    def forward(self, h: Tensor, cos: Tensor, sin: Tensor,
                mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        attn, k, v = self.self_attn(self.input_layernorm(h), cos, sin, mask)
        h = h + self.post_attention_layernorm(attn)
        mlp = self.mlp(self.pre_feedforward_layernorm(h))
        return h + self.post_feedforward_layernorm(mlp), k, v


class GemmaModel(nn.Module):
    """Scaled embedding, decoder layers, final RMSNorm, tied and soft-capped LM head.

    A decode step's local layers cache at most ``window - 1`` tokens; a prompt's local layers
    see the last ``window`` tokens through the sliding-window mask (only when the prompt is
    longer than the window: otherwise it equals the causal mask), built in the graph."""

    def __init__(self, cfg: DecoderConfig, batch: int, length: int, dtype: str, phase: str):
        check_heads(cfg)
        self.cfg, self.phase, self.length, self.dtype = cfg, phase, length, dtype
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden, dtype=dtype)
        self.layers = nn.ModuleList([
            GemmaLayer(cfg, batch, cache_length(cfg, i, length) if phase == "decode" else length,
                       dtype, phase)
            for i in range(cfg.layers)
        ])
        self.norm = nn.RMSNorm(cfg.hidden, -1, cfg.norm_eps, bias=False, dtype=dtype)

    def forward(self, input_ids: Tensor, rope_cos: Tensor, rope_sin: Tensor):
        cfg = self.cfg
        causal_mask, sliding_mask = prefill_masks(cfg, self.phase, self.length, self.dtype)
        h = self.embed_tokens(input_ids) * math.sqrt(cfg.hidden)
        kv: list[Tensor] = []
        for i, layer in enumerate(self.layers):
            h, k, v = layer(h, rope_cos, rope_sin, layer_mask(cfg, i, causal_mask, sliding_mask))
            kv += [k, v]

        def logits(x: Tensor) -> Tensor:
            return softcap(op.matmul(self.norm(x), transpose_last(self.embed_tokens.weight)),
                           cfg.final_softcap)

        return model_outputs(self.phase, h, kv, logits)


@workload_builder
def gemma2(
    size: str = "gemma2-27b",
    *,
    batch: int = 1,
    context: int | None = None,
    seq_len: int | None = None,
    phase: str = "decode",
    num_layers: int | None = None,
    tiny: bool = False,
    dtype: str | None = None,
) -> Workload:
    """Gemma 2 27B in ``phase`` (``"decode"`` with ``context``, ``"prefill"`` or ``"train"``
    with ``seq_len``; see :func:`tvm_icca.workloads.llama.llama2`). Sliding-window layers
    cache at most 4,095 tokens in decode and see the last 4,096 of a prompt."""
    cfg = CONFIGS[size]
    return build_decoder(
        size, GemmaModel, cfg, batch=batch, context=context, seq_len=seq_len, phase=phase,
        num_layers=num_layers, tiny=tiny, dtype=dtype, rotary_inputs=True,
        description="Gemma Team 2024",
    )
