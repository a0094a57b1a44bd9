"""What reading one offloaded operator's TE yields: its tensor expression and input sources.

The general reader (:func:`tvm_icca.lower.te_to_expr.extract_op`) and the operator families
with a reader of their own (:func:`tvm_icca.ops.gather.gather_op`) both return an
:class:`ExtractedOp`; the region lowering (:mod:`tvm_icca.lower.region`) maps its inputs back
to region tensors or constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from runtime_sim.contract.expr import TensorExpr

__all__ = ["ExtractedOp"]


@dataclass(frozen=True)
class ExtractedOp:
    """A :class:`TensorExpr` plus where each of its inputs comes from.

    ``param_of_input[i]`` is the index (in ``func.params``) of the parameter that
    ``expr.inputs[i]`` reads, or ``None`` when that input is a constant baked into the
    function; its value is then ``constants[i]``. A parameter can back two inputs when the
    body reads it through two index maps that cannot share one partitioning.
    """

    expr: TensorExpr
    param_of_input: tuple[int | None, ...]
    constants: Mapping[int, np.ndarray] = field(default_factory=dict)
