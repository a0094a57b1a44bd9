"""Llama 2 (Touvron et al. 2023, arXiv:2307.09288): a decode step, a prefill or a training forward.

Architecture (paper §2.2 and Table 1; Hugging Face ``modeling_llama``): pre-normalization with
RMSNorm (Zhang & Sennrich 2019), rotary position embeddings (Su et al. 2021), SwiGLU MLP
``down(silu(gate(x)) * up(x))`` (Shazeer 2020), no biases, untied LM head; the 70B model uses
grouped-query attention with 8 KV heads (Ainslie et al. 2023; paper §2.2).

Hyper-parameters are those of the official checkpoints' ``config.json``
(huggingface.co/meta-llama/Llama-2-{7b,13b,70b}-hf): ``rms_norm_eps = 1e-5``,
``rope_theta = 10000``, ``vocab_size = 32000``, ``max_position_embeddings = 4096``.
"""

from __future__ import annotations

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from tvm_icca.workloads._common import Workload, workload_builder
from tvm_icca.workloads._llm import (
    DecoderConfig,
    attention_class,
    build_decoder,
    check_heads,
    model_outputs,
    prefill_masks,
)

CONFIGS: dict[str, DecoderConfig] = {
    # hidden, layers, heads, kv heads, intermediate size: paper Table 1 / config.json
    "llama2-7b": DecoderConfig(hidden=4096, layers=32, heads=32, kv_heads=32, ffn=11008, vocab=32000),
    "llama2-13b": DecoderConfig(hidden=5120, layers=40, heads=40, kv_heads=40, ffn=13824, vocab=32000),
    "llama2-70b": DecoderConfig(hidden=8192, layers=80, heads=64, kv_heads=8, ffn=28672, vocab=32000),
}


class LlamaMLP(nn.Module):
    def __init__(self, cfg: DecoderConfig, dtype: str):
        self.gate_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(cfg.ffn, cfg.hidden, bias=False, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(op.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig, batch: int, length: int, dtype: str, phase: str):
        self.input_layernorm = nn.RMSNorm(cfg.hidden, -1, cfg.norm_eps, bias=False, dtype=dtype)
        self.self_attn = attention_class(phase)(cfg, batch, length, dtype, bias=False, use_rotary=True,
                                                names=("q_proj", "k_proj", "v_proj", "o_proj"))
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden, -1, cfg.norm_eps, bias=False, dtype=dtype)
        self.mlp = LlamaMLP(cfg, dtype)

    def forward(self, h: Tensor, cos: Tensor, sin: Tensor,
                mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        attn, k, v = self.self_attn(self.input_layernorm(h), cos, sin, mask)
        h = h + attn
        return h + self.mlp(self.post_attention_layernorm(h)), k, v


class LlamaModel(nn.Module):
    """Embedding, ``layers`` decoder layers, final RMSNorm and the LM head, in ``phase``."""

    def __init__(self, cfg: DecoderConfig, batch: int, length: int, dtype: str, phase: str):
        check_heads(cfg)
        self.cfg, self.phase, self.length, self.dtype = cfg, phase, length, dtype
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden, dtype=dtype)
        self.layers = nn.ModuleList([LlamaLayer(cfg, batch, length, dtype, phase)
                                     for _ in range(cfg.layers)])
        self.norm = nn.RMSNorm(cfg.hidden, -1, cfg.norm_eps, bias=False, dtype=dtype)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False, dtype=dtype)

    def forward(self, input_ids: Tensor, rope_cos: Tensor, rope_sin: Tensor):
        causal_mask, _ = prefill_masks(self.cfg, self.phase, self.length, self.dtype)
        h = self.embed_tokens(input_ids)
        kv: list[Tensor] = []
        for layer in self.layers:
            h, k, v = layer(h, rope_cos, rope_sin, causal_mask)
            kv += [k, v]
        return model_outputs(self.phase, h, kv, lambda x: self.lm_head(self.norm(x)))


@workload_builder
def llama2(
    size: str = "llama2-7b",
    *,
    batch: int = 1,
    context: int | None = None,
    seq_len: int | None = None,
    phase: str = "decode",
    num_layers: int | None = None,
    tiny: bool = False,
    dtype: str | None = None,
) -> Workload:
    """``size`` (``llama2-7b``, ``llama2-13b``, ``llama2-70b``) in ``phase``.

    ``phase="decode"`` (default): one step, ``context`` tokens (default 2,048) in each layer's
    KV cache. ``"prefill"`` / ``"train"``: ``seq_len`` tokens (default 2,048) per sequence
    with causal attention (see :mod:`tvm_icca.workloads._llm`). ``tiny`` swaps in a 2-layer,
    64-wide config of the same architecture (GQA kept for 70B); ``dtype`` defaults to float16
    (float32 when tiny, for exact comparisons).
    """
    cfg = CONFIGS[size]
    return build_decoder(
        size, LlamaModel, cfg, batch=batch, context=context, seq_len=seq_len, phase=phase,
        num_layers=num_layers, tiny=tiny, dtype=dtype, rotary_inputs=True,
        description="Touvron et al. 2023",
    )
