"""DiT-XL/2 (Peebles & Xie 2023, arXiv:2212.09748): one denoising step of the diffusion transformer.

Architecture (paper §3.2, Fig. 3; reference code facebookresearch/DiT ``models.py``): the
``32x32x4`` latent of a 256x256 image is split into 2x2 patches by a stride-2 convolution
(256 tokens) plus fixed 2-D sine-cosine position embeddings; the conditioning ``c`` is the sum
of a timestep embedding (256 sinusoidal frequencies -> Linear -> SiLU -> Linear) and a class
embedding (1000 classes + 1 "null" class for classifier-free guidance). Each of the 28 blocks
is adaLN-Zero: ``SiLU(c) -> Linear(6 * hidden)`` gives shift/scale/gate for the attention and
MLP branches; ``x += gate * Attn(LN(x) * (1 + scale) + shift)`` (LayerNorm without affine,
eps 1e-6), then the same with an MLP of ratio 4 with tanh-GELU. The final layer is an adaLN
LayerNorm and a linear map to ``2 * 2 * 8`` values per token (noise and variance,
``learn_sigma``), unpatchified to ``[batch, 8, 32, 32]``.

Hyper-parameters (paper Table 1, "XL": 28 layers, hidden 1152, 16 heads; patch 2; 256x256
images -> 32x32 latents). The attention is timm's: one fused qkv linear.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
from tvm import relax
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.core import wrap_nested

from tvm_icca.workloads._common import (
    TensorSpec,
    Workload,
    default_dtype,
    export_workload,
    workload_builder,
)
from tvm_icca.workloads._layers import Mlp, gelu_tanh, heads_last, token_sampler, transpose_last


@dataclass(frozen=True)
class DiTConfig:
    latent: int = 32
    channels: int = 4
    patch: int = 2
    hidden: int = 1152
    layers: int = 28
    heads: int = 16
    mlp_ratio: int = 4
    classes: int = 1000
    freq_dim: int = 256
    learn_sigma: bool = True

    @property
    def tokens(self) -> int:
        return (self.latent // self.patch) ** 2

    @property
    def out_channels(self) -> int:
        return 2 * self.channels if self.learn_sigma else self.channels


CONFIGS = {"dit-xl2": DiTConfig()}
TINY = DiTConfig(latent=8, hidden=64, layers=2, heads=4, classes=10, freq_dim=16)


def layer_norm(x: Tensor, dim: int) -> Tensor:
    """LayerNorm without affine parameters, eps 1e-6 (DiT's norm1/norm2/norm_final)."""
    return op.layer_norm(x, dim, eps=1e-6)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """``x * (1 + scale) + shift`` with per-sample shift/scale broadcast over the tokens."""
    return x * (op.unsqueeze(scale, 1) + 1.0) + op.unsqueeze(shift, 1)


class TimestepEmbedder(nn.Module):
    def __init__(self, cfg: DiTConfig, dtype: str):
        self.freq_dim = cfg.freq_dim
        self.linear_1 = nn.Linear(cfg.freq_dim, cfg.hidden, dtype=dtype)
        self.linear_2 = nn.Linear(cfg.hidden, cfg.hidden, dtype=dtype)

    def forward(self, t: Tensor) -> Tensor:
        half = self.freq_dim // 2
        # float32 like the reference (t[:, None].float()): fp16 cannot resolve t * freq ~ 1e3.
        freqs = np.exp(-math.log(10000.0) * np.arange(half) / half).astype("float32")
        args = op.unsqueeze(t, 1) * nn.Tensor.from_const(freqs.reshape(1, half))
        emb = op.concat([_unary(relax.op.cos, args), _unary(relax.op.sin, args)], dim=-1)
        if emb.dtype != self.linear_1.weight.dtype:
            emb = op.astype(emb, self.linear_1.weight.dtype)
        return self.linear_2(op.silu(self.linear_1(emb)))


def _unary(relax_op: Callable[[relax.Expr], relax.Expr], x: Tensor) -> Tensor:
    """A Relax elementwise op nn.op does not wrap (cos, sin)."""
    return wrap_nested(relax_op(x._expr), relax_op.__name__)


class DiTAttention(nn.Module):
    def __init__(self, cfg: DiTConfig, batch: int, dtype: str):
        self.cfg, self.batch = cfg, batch
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden, dtype=dtype)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        cfg, b, n = self.cfg, self.batch, self.cfg.tokens
        hd = cfg.hidden // cfg.heads
        # timm: qkv(x).reshape(B, N, 3, H, hd).permute(2, 0, 3, 1, 4); q, k, v = qkv.unbind(0)
        qkv = op.permute_dims(op.reshape(self.qkv(x), (b, n, 3, cfg.heads, hd)), [2, 0, 3, 1, 4])
        q, k, v = (op.squeeze(t, 0) for t in op.split(qkv, 3, axis=0))
        scores = op.matmul(q, transpose_last(k)) * (hd ** -0.5)
        return self.proj(heads_last(op.matmul(op.softmax(scores, axis=-1), v)))


class DiTBlock(nn.Module):
    def __init__(self, cfg: DiTConfig, batch: int, dtype: str):
        self.hidden = cfg.hidden
        self.attn = DiTAttention(cfg, batch, dtype)
        self.mlp = Mlp(cfg.hidden, cfg.mlp_ratio * cfg.hidden, gelu_tanh, dtype)
        self.adaLN_modulation = nn.Linear(cfg.hidden, 6 * cfg.hidden, dtype=dtype)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        mod = op.chunk(self.adaLN_modulation(op.silu(c)), 6, dim=1)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mod
        x = x + op.unsqueeze(gate_msa, 1) * self.attn(modulate(layer_norm(x, self.hidden), shift_msa, scale_msa))
        return x + op.unsqueeze(gate_mlp, 1) * self.mlp(modulate(layer_norm(x, self.hidden), shift_mlp, scale_mlp))


class DiT(nn.Module):
    def __init__(self, cfg: DiTConfig, batch: int, dtype: str):
        self.cfg, self.batch = cfg, batch
        self.x_embedder = nn.Conv2D(cfg.channels, cfg.hidden, cfg.patch, stride=cfg.patch, dtype=dtype)
        self.pos_embed = nn.Parameter((1, cfg.tokens, cfg.hidden), dtype)  # fixed sin-cos table
        self.t_embedder = TimestepEmbedder(cfg, dtype)
        self.y_embedder = nn.Embedding(cfg.classes + 1, cfg.hidden, dtype=dtype)
        self.blocks = nn.ModuleList([DiTBlock(cfg, batch, dtype) for _ in range(cfg.layers)])
        self.final_adaLN_modulation = nn.Linear(cfg.hidden, 2 * cfg.hidden, dtype=dtype)
        self.final_linear = nn.Linear(cfg.hidden, cfg.patch * cfg.patch * cfg.out_channels, dtype=dtype)

    def forward(self, latents: Tensor, timesteps: Tensor, labels: Tensor) -> Tensor:
        cfg, b = self.cfg, self.batch
        side = cfg.latent // cfg.patch
        x = self.x_embedder(latents)  # [b, hidden, side, side]
        x = op.permute_dims(op.reshape(x, (b, cfg.hidden, cfg.tokens)), [0, 2, 1]) + self.pos_embed
        c = self.t_embedder(timesteps) + self.y_embedder(labels)
        for block in self.blocks:
            x = block(x, c)
        shift, scale = op.chunk(self.final_adaLN_modulation(op.silu(c)), 2, dim=1)
        x = self.final_linear(modulate(layer_norm(x, cfg.hidden), shift, scale))
        # unpatchify: [b, h, w, p, q, c] -> [b, c, h, p, w, q] -> [b, c, h*p, w*q]
        p, oc = cfg.patch, cfg.out_channels
        x = op.permute_dims(op.reshape(x, (b, side, side, p, p, oc)), [0, 5, 1, 3, 2, 4])
        return op.reshape(x, (b, oc, side * p, side * p))


@workload_builder
def dit(
    size: str = "dit-xl2",
    *,
    batch: int = 1,
    num_layers: int | None = None,
    tiny: bool = False,
    dtype: str | None = None,
) -> Workload:
    """One DiT-XL/2 denoising step on ``batch`` 32x32x4 latents (256x256 images)."""
    cfg = TINY if tiny else CONFIGS[size]
    if num_layers is not None:
        cfg = replace(cfg, layers=int(num_layers))
    dtype = default_dtype(dtype, tiny)
    inputs = [
        TensorSpec("latents", (batch, cfg.channels, cfg.latent, cfg.latent), dtype),
        TensorSpec("timesteps", (batch,), "float32", "input",
                   lambda rng: rng.integers(0, 1000, size=(batch,))),
        TensorSpec("labels", (batch,), "int32", "input", token_sampler((batch,), cfg.classes + 1)),
    ]
    config = {**cfg.__dict__, "batch": batch, "dtype": dtype, "tiny": tiny}
    return export_workload(size, DiT(cfg, batch, dtype), inputs, config,
                           f"DiT-XL/2 (Peebles & Xie 2023) denoising step: batch {batch}")
