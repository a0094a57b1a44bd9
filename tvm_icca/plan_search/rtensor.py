"""Per-tensor view of a plan: T10's RotatingTensor (§4.1, Fig. 5, Table 1)."""

from __future__ import annotations

import math

from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import RotatingTensor


def rotating_tensors(layout: OpLayout) -> list[RotatingTensor]:
    """The rTensors of one planned operator: f_s, f_t and rp per dimension of each tensor
    (T10 §4.1, Fig. 5, Table 1).

    ``f_s`` of a dimension is the number of distinct sub-tensor windows along it (the
    product of F_op over the axes that index it; compound dimensions overlap by a halo).
    ``f_t`` splits each sub-tensor further into partitions that rotate among the cores
    sharing it. ``rp`` follows Fig. 6: the elements shifted per step along a rotating
    dimension, 0 where the tensor does not rotate.

    Parameters
    ----------
    layout : OpLayout
        The operator under its plan (``OpLayout(expr, plan)``, or ``PlannedOp.layout``).

    Returns
    -------
    list of RotatingTensor
        One per tensor of the expression: inputs in order, then the output.
    """
    result = []
    for t, access in enumerate(layout.expr.tensors):
        fs, ft, rp = [], [], []
        for idx in access.indices:
            axes = [a for a in idx.axes if a in layout.extent]
            fs.append(math.prod(layout.F[a] for a in axes))
            if idx.is_simple and axes and layout.plan.ft(t, axes[0]) > 1:
                ft.append(layout.plan.ft(t, axes[0]))
                rp.append(layout.rp[axes[0]])
            else:
                ft.append(1)
                rp.append(0)
        result.append(
            RotatingTensor(access.name, access.shape, access.dtype, tuple(fs), tuple(ft), tuple(rp))
        )
    return result
