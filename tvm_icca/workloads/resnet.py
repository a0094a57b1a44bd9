"""ResNet-18 and ResNet-50 (He et al. 2016, arXiv:1512.03385), ImageNet inference.

Architecture (paper §3.3-3.4, Table 1; torchvision's v1.5 variant with the stride on the 3x3
convolution of a bottleneck): a 7x7/2 stem, 3x3/2 max pooling, four stages of residual blocks
(basic blocks [2, 2, 2, 2] for ResNet-18, bottlenecks [3, 4, 6, 3] with expansion 4 for
ResNet-50), global average pooling and a 1000-way linear classifier. Projection shortcuts
(1x1 convolutions) where the shape changes (option B of §3.3).

Batch normalization is folded into the preceding convolution for inference (each conv gets a
bias), the usual deployment transform (e.g. TVM's ``FoldScaleAxis`` / ONNX exporters). Global
average pooling is written as a mean over H and W (identical to ``AdaptiveAvgPool2d(1)``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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


@dataclass(frozen=True)
class ResNetConfig:
    blocks: tuple[int, ...]
    bottleneck: bool
    widths: tuple[int, ...] = (64, 128, 256, 512)
    image: int = 224
    classes: int = 1000


CONFIGS = {
    "resnet18": ResNetConfig(blocks=(2, 2, 2, 2), bottleneck=False),
    "resnet50": ResNetConfig(blocks=(3, 4, 6, 3), bottleneck=True),
}


def _tiny(cfg: ResNetConfig) -> ResNetConfig:
    return replace(cfg, blocks=(1, 1, 1, 1), widths=(8, 16, 16, 32), image=32, classes=10)


def conv(cin: int, cout: int, k: int, stride: int, dtype: str) -> nn.Conv2D:
    """A convolution with its batch norm folded in (hence the bias); 'same' padding."""
    return nn.Conv2D(cin, cout, k, stride=stride, padding=k // 2, bias=True, dtype=dtype)


def max_pool(x: Tensor) -> Tensor:
    """The 3x3/2 max pooling of the stem (padding 1)."""
    return wrap_nested(relax.op.nn.max_pool2d(x._expr, pool_size=3, strides=2, padding=1), "max_pool")


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int, dtype: str):
        self.conv1 = conv(cin, width, 3, stride, dtype)
        self.conv2 = conv(width, width, 3, 1, dtype)
        self.downsample = conv(cin, width, 1, stride, dtype) if stride != 1 or cin != width else None

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv2(op.relu(self.conv1(x)))
        shortcut = self.downsample(x) if self.downsample is not None else x
        return op.relu(out + shortcut)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int, dtype: str):
        cout = width * self.expansion
        self.conv1 = conv(cin, width, 1, 1, dtype)
        self.conv2 = conv(width, width, 3, stride, dtype)
        self.conv3 = conv(width, cout, 1, 1, dtype)
        self.downsample = conv(cin, cout, 1, stride, dtype) if stride != 1 or cin != cout else None

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv3(op.relu(self.conv2(op.relu(self.conv1(x)))))
        shortcut = self.downsample(x) if self.downsample is not None else x
        return op.relu(out + shortcut)


class ResNet(nn.Module):
    def __init__(self, cfg: ResNetConfig, dtype: str):
        block = Bottleneck if cfg.bottleneck else BasicBlock
        self.conv1 = conv(3, cfg.widths[0], 7, 2, dtype)
        blocks: list[nn.Module] = []
        cin = cfg.widths[0]
        for stage, (count, width) in enumerate(zip(cfg.blocks, cfg.widths)):
            for i in range(count):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(block(cin, width, stride, dtype))
                cin = width * block.expansion
        self.layers = nn.ModuleList(blocks)
        self.fc = nn.Linear(cin, cfg.classes, dtype=dtype)

    def forward(self, images: Tensor) -> Tensor:
        x = max_pool(op.relu(self.conv1(images)))
        for block in self.layers:
            x = block(x)
        pooled = wrap_nested(relax.op.mean(x._expr, axis=[2, 3]), "avg_pool")
        return self.fc(pooled)


@workload_builder
def resnet(
    size: str = "resnet50",
    *,
    batch: int = 1,
    image: int | None = None,
    num_layers: int | None = None,
    tiny: bool = False,
    dtype: str | None = None,
) -> Workload:
    """ResNet-18/50 on ``batch`` RGB images of ``image`` x ``image`` pixels (default 224).

    ``num_layers`` keeps the first ``num_layers`` residual blocks (with the stem and head).
    """
    cfg = _tiny(CONFIGS[size]) if tiny else CONFIGS[size]
    if image is not None:
        cfg = replace(cfg, image=int(image))
    if num_layers is not None:
        kept, left = [], int(num_layers)
        for count in cfg.blocks:
            kept.append(max(0, min(count, left)))
            left -= kept[-1]
        # A stage without blocks would drop its width change: keep the stages that have blocks.
        stages = [i for i, n in enumerate(kept) if n]
        cfg = replace(cfg, blocks=tuple(kept[i] for i in stages),
                      widths=tuple(cfg.widths[i] for i in stages))
    dtype = default_dtype(dtype, tiny)
    inputs = [TensorSpec("images", (batch, 3, cfg.image, cfg.image), dtype)]
    config = {**cfg.__dict__, "batch": batch, "dtype": dtype, "tiny": tiny}
    return export_workload(size, ResNet(cfg, dtype), inputs, config,
                           f"{size} (He et al. 2016), BN folded: batch {batch}, {cfg.image}x{cfg.image}")
