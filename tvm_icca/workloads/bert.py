"""BERT-large encoder (Devlin et al. 2019, arXiv:1810.04805), inference over whole sequences.

Architecture (paper §3; Hugging Face ``modeling_bert``): token + position + segment embeddings
followed by LayerNorm, then post-LayerNorm transformer layers (Vaswani et al. 2017): multi-head
self-attention with biases, ``LN(x + attn)``, a GELU (erf) FFN, ``LN(x + ffn)``. Output: the
last hidden states (the encoder, as in T10's BERT benchmark, §6.1 Table 2); no pooler/head.
All tokens are valid (no padding mask), as for T10's fixed-length inputs.

Hyper-parameters (paper §3, "BERT_LARGE (L=24, H=1024, A=16)"; config.json of
huggingface.co/bert-large-uncased): intermediate 4096, vocab 30522, 512 positions, 2 segment
types, LayerNorm eps 1e-12.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor

from runtime_sim.contract.errors import InvalidWorkloadError
from tvm_icca.workloads._common import (
    TensorSpec,
    Workload,
    default_dtype,
    export_workload,
    workload_builder,
)
from tvm_icca.workloads._layers import Mlp, gelu, self_attention, token_sampler


@dataclass(frozen=True)
class BertConfig:
    hidden: int = 1024
    layers: int = 24
    heads: int = 16
    ffn: int = 4096
    vocab: int = 30522
    max_positions: int = 512
    type_vocab: int = 2
    norm_eps: float = 1e-12


CONFIGS = {"bert-large": BertConfig()}
TINY = BertConfig(hidden=64, layers=2, heads=4, ffn=128, vocab=128, max_positions=32)


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig, dtype: str):
        self.heads = cfg.heads
        self.query = nn.Linear(cfg.hidden, cfg.hidden, dtype=dtype)
        self.key = nn.Linear(cfg.hidden, cfg.hidden, dtype=dtype)
        self.value = nn.Linear(cfg.hidden, cfg.hidden, dtype=dtype)
        self.output = nn.Linear(cfg.hidden, cfg.hidden, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self_attention(self.query(x), self.key(x), self.value(x), self.heads))


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig, dtype: str):
        self.attention = BertSelfAttention(cfg, dtype)
        self.attention_norm = nn.LayerNorm(cfg.hidden, cfg.norm_eps, dtype=dtype)
        self.ffn = Mlp(cfg.hidden, cfg.ffn, gelu, dtype, names=("intermediate", "output"))
        self.output_norm = nn.LayerNorm(cfg.hidden, cfg.norm_eps, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        x = self.attention_norm(x + self.attention(x))
        return self.output_norm(x + self.ffn(x))


class BertEncoder(nn.Module):
    def __init__(self, cfg: BertConfig, dtype: str):
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.hidden, dtype=dtype)
        self.position_embeddings = nn.Embedding(cfg.max_positions, cfg.hidden, dtype=dtype)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab, cfg.hidden, dtype=dtype)
        self.embeddings_norm = nn.LayerNorm(cfg.hidden, cfg.norm_eps, dtype=dtype)
        self.layers = nn.ModuleList([BertLayer(cfg, dtype) for _ in range(cfg.layers)])

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        x = (self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
             + self.token_type_embeddings(token_type_ids))
        x = self.embeddings_norm(x)
        for layer in self.layers:
            x = layer(x)
        return x


@workload_builder
def bert(
    size: str = "bert-large",
    *,
    batch: int = 1,
    seq_len: int | None = None,
    num_layers: int | None = None,
    tiny: bool = False,
    dtype: str | None = None,
) -> Workload:
    """BERT-large over ``batch`` sequences of ``seq_len`` tokens (at most 512; default 128,
    16 when tiny)."""
    cfg = TINY if tiny else CONFIGS[size]
    seq_len = seq_len if seq_len is not None else (16 if tiny else 128)
    if num_layers is not None:
        cfg = replace(cfg, layers=int(num_layers))
    if not 1 <= seq_len <= cfg.max_positions:
        raise InvalidWorkloadError(f"{size}: seq_len={seq_len} must be in [1, {cfg.max_positions}]")
    dtype = default_dtype(dtype, tiny)
    shape = (batch, seq_len)
    inputs = [
        TensorSpec("input_ids", shape, "int32", "input", token_sampler(shape, cfg.vocab)),
        TensorSpec("token_type_ids", shape, "int32", "input", token_sampler(shape, cfg.type_vocab)),
        TensorSpec("position_ids", shape, "int32", "input",
                   lambda _rng: np.broadcast_to(np.arange(seq_len), shape).copy()),
    ]
    config = {**cfg.__dict__, "batch": batch, "seq_len": seq_len, "dtype": dtype, "tiny": tiny}
    return export_workload(size, BertEncoder(cfg, dtype), inputs, config,
                           f"{size} encoder (Devlin et al. 2019): batch {batch}, {seq_len} tokens")
