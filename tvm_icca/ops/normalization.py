"""Instance normalization (and group normalization through it) as one operator on the chip.

TVM's ONNX importer writes ``InstanceNormalization`` as Relax arithmetic: ``mean`` and a
two-pass ``variance`` over the axes after the channels, ``(x - mean) / sqrt(var + eps)``, then
``* scale + B`` per channel. PyTorch exports ``nn.GroupNorm`` below opset 18 as an
``InstanceNormalization`` of the ``[N, G, -1]`` view, and
:class:`tvm_icca.frontend.group_norm.DecomposeGroupNorm` writes ONNX ``GroupNormalization`` in
the same form. :func:`instance_norm_patterns` matches the whole normalization, with or without
its affine tail, as one composite: its TE (TVM's legalization of each op, composed) is an
elementwise map with the statistics as core-local reductions over the normalized axes, the
layer-norm template's shape (:mod:`schedules.layer_norm`; :func:`schedules.kind_of` gives the
kind from ``relax.variance``). Each op alone also has a pattern (``mean``, ``variance``, the
elementwise ops), so a normalization written any other way still runs on the chip, op by op.
"""

from __future__ import annotations

from typing import Callable

from tvm.relax.backend.pattern_registry import Pattern
from tvm.relax.dpl.pattern import DFPattern, is_op, wildcard
from tvm.relax.transform import PatternCheckContext

__all__ = ["instance_norm_patterns"]


def _normalized(data: DFPattern) -> tuple[DFPattern, dict[str, DFPattern]]:
    eps = wildcard()
    mean = is_op("relax.mean")(data)
    var = is_op("relax.variance")(data)
    root = is_op("relax.divide")(is_op("relax.subtract")(data, mean),
                                 is_op("relax.sqrt")(is_op("relax.add")(var, eps)))
    return root, {"data": data, "epsilon": eps, "root": root}


def instance_norm_patterns(prefix: str, check: Callable[[PatternCheckContext], bool],
                           check_affine: Callable[[PatternCheckContext], bool]) -> list[Pattern]:
    """``<prefix>.instance_norm`` and ``<prefix>.instance_norm_affine`` (``* scale + bias``
    after it), smallest first (``register_patterns`` tries later entries first). ``check``
    is the table's operand check; ``check_affine`` also keeps the normalization's shape
    (an epilogue must not broadcast it up)."""
    root, annotations = _normalized(wildcard())
    plain: Pattern = (f"{prefix}.instance_norm", root, annotations, check)
    scale, bias = wildcard(), wildcard()
    affine_root = is_op("relax.add")(is_op("relax.multiply")(root, scale), bias)
    affine: Pattern = (f"{prefix}.instance_norm_affine", affine_root,
                       {**annotations, "scale": scale, "bias": bias}, check_affine)
    return [plain, affine]
