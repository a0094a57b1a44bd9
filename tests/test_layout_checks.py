"""runtime_sim.contract.layout_checks: the batched ring rule (rings_hold) gives check_rings'
verdict on every plan of small operators, valid or not."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from runtime_sim.contract.errors import InvalidPlanError
from runtime_sim.contract.layout import CoreLayout, OpLayout
from runtime_sim.contract.layout_checks import check_rings, rings_hold
from runtime_sim.contract.plan import ExecutionPlan
from tvm_icca.testing import exprs


def _plans(expr, cores: int):
    """Every F_op on up to ``cores`` cores with every temporal factor on each tensor's own
    axes whose product is at most the cores sharing its sub-tensor (other plans' rings are
    decided by the same arrays)."""
    axes = expr.axis_names
    extent = {a.name: a.extent for a in expr.axes}
    for F in itertools.product(*[range(1, extent[a] + 1) for a in axes]):
        if math.prod(F) > cores:
            continue
        base = OpLayout(expr, ExecutionPlan(dict(zip(axes, F)), tuple({} for _ in expr.tensors)))
        per_tensor = []
        for t in range(len(expr.tensors)):
            own, P = base.tensor_axes(t), base.sharing(t)
            per_tensor.append([dict(zip(own, c)) for c in
                               itertools.product(range(1, P + 1), repeat=len(own))
                               if math.prod(c) <= P])
        for temporal in itertools.product(*per_tensor):
            yield F, temporal


@pytest.mark.parametrize("expr", [exprs.matmul(4, 6, 4), exprs.matmul(6, 4, 2, batch=2),
                                  exprs.conv2d(1, 2, 4, 4, 2, 2, 2),
                                  exprs.attention_expr(4, 6, 2), exprs.matmul(4, 6, 4, transpose_b=True)],
                         ids=["matmul", "batched-matmul", "conv2d", "attention", "matmul-bt"])
def test_batched_ring_rule_is_check_rings(expr):
    axes = expr.axis_names
    own = np.array([[a in OpLayout(expr, ExecutionPlan({}, tuple({} for _ in expr.tensors)))
                     .tensor_axes(t) for a in axes] for t in range(len(expr.tensors))])
    F, ft, want = [], [], []
    for f, temporal in _plans(expr, 8):
        layout = OpLayout(expr, ExecutionPlan(dict(zip(axes, f)), tuple(temporal)))
        try:
            check_rings(layout)
            want.append(True)
        except InvalidPlanError:
            want.append(False)
        F.append(f)
        ft.append([[t.get(a, 1) for a in axes] for t in temporal])
    got = rings_hold(CoreLayout(own, np.array(F), np.array(ft)))
    assert 0 < sum(want) < len(want)    # both verdicts occur
    assert got.tolist() == want
