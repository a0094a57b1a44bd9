"""ViT-Base/16 (Dosovitskiy et al. 2021, arXiv:2010.11929), image classification.

Architecture (paper §3.1, Eq. 1-4): 16x16 patches embedded by a stride-16 convolution, a
learned class token prepended, learned position embeddings, pre-LayerNorm transformer layers
(multi-head self-attention with biases; MLP with exact GELU), a final LayerNorm and a linear
classifier on the class token.

Hyper-parameters (paper Table 1, "ViT-Base": 12 layers, hidden 768, MLP 3072, 12 heads; patch
16, 224x224 inputs -> 196 patches + 1 class token; LayerNorm eps 1e-6 of the reference JAX
code; 1000 ImageNet classes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from tvm_icca.workloads._common import (
    TensorSpec,
    Workload,
    default_dtype,
    export_workload,
    workload_builder,
)
from tvm_icca.workloads._layers import Mlp, gelu, self_attention


@dataclass(frozen=True)
class ViTConfig:
    image: int = 224
    patch: int = 16
    channels: int = 3
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    mlp: int = 3072
    classes: int = 1000
    norm_eps: float = 1e-6

    @property
    def tokens(self) -> int:
        return (self.image // self.patch) ** 2 + 1


CONFIGS = {"vit-b16": ViTConfig()}
TINY = ViTConfig(image=32, patch=8, hidden=64, layers=2, heads=4, mlp=128, classes=10)


class ViTAttention(nn.Module):
    def __init__(self, cfg: ViTConfig, dtype: str):
        self.heads = cfg.heads
        self.query = nn.Linear(cfg.hidden, cfg.hidden, dtype=dtype)
        self.key = nn.Linear(cfg.hidden, cfg.hidden, dtype=dtype)
        self.value = nn.Linear(cfg.hidden, cfg.hidden, dtype=dtype)
        self.out = nn.Linear(cfg.hidden, cfg.hidden, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self_attention(self.query(x), self.key(x), self.value(x), self.heads))


class ViTLayer(nn.Module):
    def __init__(self, cfg: ViTConfig, dtype: str):
        self.norm1 = nn.LayerNorm(cfg.hidden, cfg.norm_eps, dtype=dtype)
        self.attn = ViTAttention(cfg, dtype)
        self.norm2 = nn.LayerNorm(cfg.hidden, cfg.norm_eps, dtype=dtype)
        self.mlp = Mlp(cfg.hidden, cfg.mlp, gelu, dtype)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, cfg: ViTConfig, batch: int, dtype: str):
        self.cfg, self.batch = cfg, batch
        self.patch_embed = nn.Conv2D(cfg.channels, cfg.hidden, cfg.patch, stride=cfg.patch, dtype=dtype)
        self.cls_token = nn.Parameter((1, 1, cfg.hidden), dtype)
        self.pos_embed = nn.Parameter((1, cfg.tokens, cfg.hidden), dtype)
        self.layers = nn.ModuleList([ViTLayer(cfg, dtype) for _ in range(cfg.layers)])
        self.norm = nn.LayerNorm(cfg.hidden, cfg.norm_eps, dtype=dtype)
        self.head = nn.Linear(cfg.hidden, cfg.classes, dtype=dtype)

    def forward(self, pixel_values: Tensor) -> Tensor:
        cfg, b = self.cfg, self.batch
        x = self.patch_embed(pixel_values)  # [b, hidden, h, w]
        x = op.permute_dims(op.reshape(x, (b, cfg.hidden, cfg.tokens - 1)), [0, 2, 1])
        cls = op.broadcast_to(self.cls_token, (b, 1, cfg.hidden))
        x = op.concat([cls, x], dim=1) + self.pos_embed
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        cls_out = op.reshape(op.split(x, [1], axis=1)[0], (b, cfg.hidden))
        return self.head(cls_out)


@workload_builder
def vit(
    size: str = "vit-b16",
    *,
    batch: int = 1,
    num_layers: int | None = None,
    tiny: bool = False,
    dtype: str | None = None,
) -> Workload:
    """ViT-Base/16 on ``batch`` 224x224 RGB images (NCHW)."""
    cfg = TINY if tiny else CONFIGS[size]
    if num_layers is not None:
        cfg = replace(cfg, layers=int(num_layers))
    dtype = default_dtype(dtype, tiny)
    inputs = [TensorSpec("pixel_values", (batch, cfg.channels, cfg.image, cfg.image), dtype)]
    config = {**cfg.__dict__, "batch": batch, "dtype": dtype, "tiny": tiny}
    return export_workload(size, ViT(cfg, batch, dtype), inputs, config,
                           f"{size} (Dosovitskiy et al. 2021): batch {batch}, {cfg.image}x{cfg.image}")
