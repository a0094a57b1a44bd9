"""2-D convolution on one core, as an implicit GEMM (M = b*h*w, N = f, K = c*kh*kw).

The input is read through compound indices ``h*stride + kh*dilation - pad`` (T10 §5); each
core holds the input window its output rows need, halo included (see
``runtime_sim.contract.layout.OpLayout.partition_shape``).
"""

from schedules.base import MatrixTemplate


class Conv2dTemplate(MatrixTemplate):
    kind = "conv2d"
