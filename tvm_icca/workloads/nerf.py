"""The NeRF MLP (Mildenhall et al. 2020, arXiv:2003.08934), one batch of sample points.

Architecture (paper §5.1 and Fig. 7 / Appendix A): the positionally encoded point
``gamma(x)`` (L = 10: 3 + 3*2*10 = 63 values) goes through 8 fully connected ReLU layers of 256
channels, with a skip connection concatenating ``gamma(x)`` to the input of the fifth; a linear
layer gives the density ``sigma`` (its ReLU is applied by the volume renderer) and a 256-wide
feature vector (no activation), which is concatenated with the encoded view direction
``gamma(d)`` (L = 4: 27 values) and mapped by a 128-channel ReLU layer and a linear layer to RGB
(the sigmoid is applied by the renderer). Output ``[rgb, sigma]`` per point, as in the
reference code's ``outputs = cat([rgb, alpha])``.

The positional encoding itself (sines and cosines) is host pre-processing: the inputs are
the encoded points and directions.
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


@dataclass(frozen=True)
class NeRFConfig:
    depth: int = 8
    width: int = 256
    skip: int = 4  # gamma(x) is concatenated to the output of layer `skip` (0-based: 5th input)
    pos_freqs: int = 10
    dir_freqs: int = 4
    view_width: int = 128

    @property
    def pos_dim(self) -> int:
        return 3 + 3 * 2 * self.pos_freqs

    @property
    def dir_dim(self) -> int:
        return 3 + 3 * 2 * self.dir_freqs


CONFIGS = {"nerf": NeRFConfig()}
TINY = NeRFConfig(depth=4, width=32, skip=2, pos_freqs=2, dir_freqs=1, view_width=16)


class NeRF(nn.Module):
    def __init__(self, cfg: NeRFConfig, dtype: str):
        self.skip = cfg.skip
        layers = []
        for i in range(cfg.depth):
            n_in = cfg.pos_dim if i == 0 else cfg.width + (cfg.pos_dim if i == cfg.skip + 1 else 0)
            layers.append(nn.Linear(n_in, cfg.width, dtype=dtype))
        self.pts_linears = nn.ModuleList(layers)
        self.alpha_linear = nn.Linear(cfg.width, 1, dtype=dtype)
        self.feature_linear = nn.Linear(cfg.width, cfg.width, dtype=dtype)
        self.views_linear = nn.Linear(cfg.width + cfg.dir_dim, cfg.view_width, dtype=dtype)
        self.rgb_linear = nn.Linear(cfg.view_width, 3, dtype=dtype)

    def forward(self, points: Tensor, directions: Tensor) -> Tensor:
        h = points
        for i, layer in enumerate(self.pts_linears):
            h = op.relu(layer(h))
            if i == self.skip:
                h = op.concat([points, h], dim=-1)
        alpha = self.alpha_linear(h)
        features = self.feature_linear(h)
        h = op.relu(self.views_linear(op.concat([features, directions], dim=-1)))
        return op.concat([self.rgb_linear(h), alpha], dim=-1)


@workload_builder
def nerf(
    size: str = "nerf",
    *,
    batch: int = 4096,
    num_layers: int | None = None,
    tiny: bool = False,
    dtype: str | None = None,
) -> Workload:
    """The NeRF MLP on ``batch`` sample points (e.g. 64 rays x 64 coarse samples).

    ``num_layers`` overrides the depth of the trunk (the skip stays after layer 5 if it fits).
    """
    cfg = TINY if tiny else CONFIGS[size]
    if num_layers is not None:
        cfg = replace(cfg, depth=int(num_layers))
    dtype = default_dtype(dtype, tiny)
    inputs = [TensorSpec("points", (batch, cfg.pos_dim), dtype),
              TensorSpec("directions", (batch, cfg.dir_dim), dtype)]
    config = {**cfg.__dict__, "batch": batch, "dtype": dtype, "tiny": tiny}
    return export_workload(size, NeRF(cfg, dtype), inputs, config,
                           f"NeRF MLP (Mildenhall et al. 2020): batch of {batch} sample points")
