"""OPT (Zhang et al. 2022, arXiv:2205.01068): a decode step, a prefill or a training forward.

Architecture (paper §2.1, Table 1; Hugging Face ``modeling_opt``): a GPT-style pre-LayerNorm
decoder (``do_layer_norm_before = True`` for every size here), learned absolute positions with
an offset of 2, multi-head attention and a ReLU FFN of width ``4 * d_model``, biases on every
linear layer, LM head tied to the token embedding. The query is scaled by ``head_dim ** -0.5``
right after its projection, as in the reference code.

Hyper-parameters: paper Table 1 (layers, heads, d_model) and the checkpoints' ``config.json``
(huggingface.co/facebook/opt-{1.3b,6.7b,13b,30b}): ``ffn_dim = 4 * hidden``,
``vocab_size = 50272``, ``max_position_embeddings = 2048``, LayerNorm eps ``1e-5``.
"""

from __future__ import annotations

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from tvm_icca.workloads._common import Workload, workload_builder
from tvm_icca.workloads._layers import transpose_last
from tvm_icca.workloads._llm import (
    DecoderConfig,
    attention_class,
    build_decoder,
    model_outputs,
    prefill_masks,
)

#: OPT's learned position table has 2 extra rows (positions start at index 2).
POSITION_OFFSET = 2


def _opt(hidden: int, layers: int, heads: int) -> DecoderConfig:
    return DecoderConfig(hidden=hidden, layers=layers, heads=heads, kv_heads=heads, ffn=4 * hidden,
                         vocab=50272, max_positions=2048, learned_positions=True)


CONFIGS: dict[str, DecoderConfig] = {
    "opt-1.3b": _opt(2048, 24, 32),
    "opt-6.7b": _opt(4096, 32, 32),
    "opt-13b": _opt(5120, 40, 40),
    "opt-30b": _opt(7168, 48, 56),
}


class OPTLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig, batch: int, length: int, dtype: str, phase: str):
        self.self_attn_layer_norm = nn.LayerNorm(cfg.hidden, cfg.norm_eps, dtype=dtype)
        self.self_attn = attention_class(phase)(cfg, batch, length, dtype, bias=True, use_rotary=False,
                                                names=("q_proj", "k_proj", "v_proj", "out_proj"))
        self.final_layer_norm = nn.LayerNorm(cfg.hidden, cfg.norm_eps, dtype=dtype)
        self.fc1 = nn.Linear(cfg.hidden, cfg.ffn, bias=True, dtype=dtype)
        self.fc2 = nn.Linear(cfg.ffn, cfg.hidden, bias=True, dtype=dtype)

    def forward(self, h: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        attn, k, v = self.self_attn(self.self_attn_layer_norm(h), None, None, mask)
        h = h + attn
        return h + self.fc2(op.relu(self.fc1(self.final_layer_norm(h)))), k, v


class OPTModel(nn.Module):
    """Token + position embeddings, decoder layers, final LayerNorm, tied LM head."""

    def __init__(self, cfg: DecoderConfig, batch: int, length: int, dtype: str, phase: str):
        self.cfg, self.phase, self.length, self.dtype = cfg, phase, length, dtype
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden, dtype=dtype)
        self.embed_positions = nn.Embedding(cfg.max_positions + POSITION_OFFSET, cfg.hidden, dtype=dtype)
        self.layers = nn.ModuleList([OPTLayer(cfg, batch, length, dtype, phase)
                                     for _ in range(cfg.layers)])
        self.final_layer_norm = nn.LayerNorm(cfg.hidden, cfg.norm_eps, dtype=dtype)

    def forward(self, input_ids: Tensor, position_ids: Tensor):
        causal_mask, _ = prefill_masks(self.cfg, self.phase, self.length, self.dtype)
        h = self.embed_tokens(input_ids) + self.embed_positions(position_ids)
        kv: list[Tensor] = []
        for layer in self.layers:
            h, k, v = layer(h, causal_mask)
            kv += [k, v]

        def logits(x: Tensor) -> Tensor:  # tied LM head: logits = h @ W_embed^T
            return op.matmul(self.final_layer_norm(x), transpose_last(self.embed_tokens.weight))

        return model_outputs(self.phase, h, kv, logits)


@workload_builder
def opt(
    size: str = "opt-1.3b",
    *,
    batch: int = 1,
    context: int | None = None,
    seq_len: int | None = None,
    phase: str = "decode",
    num_layers: int | None = None,
    tiny: bool = False,
    dtype: str | None = None,
) -> Workload:
    """``size`` (``opt-1.3b``, ``opt-6.7b``, ``opt-13b``, ``opt-30b``) in ``phase``
    (``"decode"`` with ``context``, ``"prefill"`` or ``"train"`` with ``seq_len``; see
    :func:`tvm_icca.workloads.llama.llama2`).

    ``position_ids`` are the tokens' positions plus OPT's offset of 2, as the host computes
    them (a decode step's is clamped to the 2,048 learned positions when ``context`` reaches
    them; a longer prompt than 2,048 is refused).
    """
    cfg = CONFIGS[size]
    return build_decoder(
        size, OPTModel, cfg, batch=batch, context=context, seq_len=seq_len, phase=phase,
        num_layers=num_layers, tiny=tiny, dtype=dtype, rotary_inputs=False,
        position_offset=POSITION_OFFSET, description="Zhang et al. 2022",
    )
