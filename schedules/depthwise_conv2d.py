"""Depthwise (and any channel-per-group) 2-D convolution on one core's vector unit.

A convolution whose every output channel reads its own input channels (``groups == F``:
MobileNet's depthwise 3x3) has no output-channel dimension to contract against: as an
implicit GEMM it is a batch of ``M x K @ K x 1`` products, the matrix unit would pad
``N = 1`` to its tile width and ``K = kh*kw`` (9) to its tile depth (T10 §4.3.1 padding),
so most of its work would be padding. It runs on the vector unit instead, one multiply-add
per window element and output point (counted as one vector operation, a fused multiply-add,
as every vector template counts the body's arithmetic nodes).
"""

from schedules.base import ComputeTemplate


class DepthwiseConv2dTemplate(ComputeTemplate):
    kind = "depthwise_conv2d"
