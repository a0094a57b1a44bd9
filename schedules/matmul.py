"""Matrix multiplication (2-D, batched, dense/linear, transposed operands) on one core.

The sub-task of a step is a batched GEMM of the chunk (T10 §3, Fig. 3); it runs on the
core's matrix unit (AMP on the IPU, a systolic array in the T10 benchmark), padded to the
unit's tile shape.
"""

from schedules.base import MatrixTemplate


class MatmulTemplate(MatrixTemplate):
    kind = "matmul"
