"""Relax rewrites for convolutional networks, run before partitioning.

Batch normalization in inference form (ONNX ``BatchNormalization`` imports as
``relax.nn.batch_norm(..., training=False)`` and ``TupleGetItem(0)``) is a per-channel scale
and shift. TVM 0.27 ships both rewrites it needs, so this module only composes them:

* :class:`tvm.relax.transform.FoldBatchnormToConv2D` folds a batch norm whose parameters are
  constants into the preceding conv2d (weights scaled per output channel, the shift becomes
  a bias add, which the ``icca.conv2d_bias*`` patterns fuse as an epilogue);
* :func:`tvm.relax.transform.DecomposeOpsForInference` writes every other batch norm as the
  elementwise ``(x - mean) / sqrt(var + eps) * gamma + beta``, which the chip runs like any
  broadcast arithmetic.

Both read the moving statistics, so they are applied only to modules without a
training-mode batch norm (whose output uses the statistics of the batch itself).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.transform import DecomposeOpsForInference, FoldBatchnormToConv2D

__all__ = ["FoldInferenceBatchNorm", "has_training_batch_norm"]

_BATCH_NORM = tvm.ir.Op.get("relax.nn.batch_norm")


def _batch_norms(mod: IRModule) -> list[relax.Call]:
    found: list[relax.Call] = []

    def visit(call: relax.Call) -> None:
        if isinstance(call.op, tvm.ir.Op) and call.op.same_as(_BATCH_NORM):
            found.append(call)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            tvm_ffi.structural_walk(func, ((relax.Call, visit),))
    return found


def has_training_batch_norm(mod: IRModule) -> bool:
    """Whether some ``relax.nn.batch_norm`` of ``mod`` normalizes with batch statistics."""
    return any(bool(call.attrs.training) for call in _batch_norms(mod))


@tvm.transform.module_pass(opt_level=0, name="FoldInferenceBatchNorm")
def FoldInferenceBatchNorm(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:  # noqa: N802
    """Fold inference batch norms into their convolutions, or decompose them elementwise.

    A module with no batch norm, or with a training-mode one, is returned unchanged.
    """
    norms = _batch_norms(mod)
    if not norms or any(bool(call.attrs.training) for call in norms):
        return mod
    return tvm.transform.Sequential([FoldBatchnormToConv2D(), DecomposeOpsForInference()])(mod)
