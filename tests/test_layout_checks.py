"""runtime_sim.contract.layout_checks: the ring rule (ring_faults, on a CoreLayout) gives one
verdict for a batch of plans (rings_hold) and for one layout (check_rings) on every plan of small
operators, valid or not, with or without a core order; check_rings' two messages."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from runtime_sim.contract.errors import InvalidPlanError
from runtime_sim.contract.core_layout import CoreLayout
from runtime_sim.contract.layout import OpLayout
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


def _verdict(layout) -> str:
    try:
        check_rings(layout)
    except InvalidPlanError as e:
        return str(e)
    return "ok"


@pytest.mark.parametrize("expr", [exprs.matmul(4, 6, 4), exprs.attention_expr(4, 6, 2)],
                         ids=["matmul", "attention"])
def test_core_order_renumbers_cores_but_keeps_the_verdict(expr):
    """check_rings reads a plan's core order (CoreLayout's grid): the cores are renumbered, a
    ring is the same set of sub-operators, so every verdict, and every message, is the one
    of the plan without it (the batched rule, which takes no core order)."""
    axes = expr.axis_names
    seen = set()
    for f, temporal in _plans(expr, 8):
        plain = OpLayout(expr, ExecutionPlan(dict(zip(axes, f)), tuple(temporal)))
        want = _verdict(plain)
        for order in (axes[::-1], axes[1:] + axes[:1]):
            mapped = OpLayout(expr, ExecutionPlan(dict(zip(axes, f)), tuple(temporal), core_order=order))
            assert _verdict(mapped) == want
            if want == "ok" and math.prod(f) > 1:
                # the same (sub-operator -> ring, partition) on renumbered cores
                perm = np.lexsort([mapped.grid[a] for a in reversed(axes)])
                for t in range(len(expr.tensors)):
                    assert (mapped.partition_key(t)[perm] == plain.partition_key(t)).all()
                    assert (mapped.ring_group_key(t)[perm] == plain.ring_group_key(t)).all()
        seen.add(want.split(" of ")[0])
    assert {"ok", "rotation rings"} <= seen


def test_the_two_messages_name_the_tensor_and_axis():
    """A ring that holds a partition twice, and ring members that would shift at different
    steps, are refused with the tensor (and axis) named; the batched rule refuses both."""
    expr = exprs.attention_expr(4, 6, 2)
    axes = expr.axis_names
    own = np.array([[a in OpLayout(expr, ExecutionPlan({}, tuple({} for _ in expr.tensors)))
                     .tensor_axes(t) for a in axes] for t in range(len(expr.tensors))])
    found = {}
    for f, temporal in _plans(expr, 8):
        msg = _verdict(OpLayout(expr, ExecutionPlan(dict(zip(axes, f)), tuple(temporal))))
        kind = "twice" if "once" in msg else "astray" if "different steps" in msg else None
        if kind and kind not in found:
            found[kind] = (dict(zip(axes, f)), tuple(temporal), msg)
    twice, astray = found["twice"], found["astray"]
    names = [t.name for t in expr.tensors]
    assert twice[2].startswith("rotation rings of ") and twice[2].split()[3] in names
    assert twice[2].endswith(" do not hold each partition once")
    F, temporal, msg = astray
    assert msg.startswith("ring members of ") and msg.split()[3] in names
    assert msg.split("'")[1] in axes
    with pytest.raises(InvalidPlanError, match=f"^{msg}$"):
        check_rings(OpLayout(expr, ExecutionPlan(F, temporal)))
    for plan in (twice, astray):
        got = rings_hold(CoreLayout(own, np.array([[plan[0].get(a, 1) for a in axes]]),
                                    np.array([[[t.get(a, 1) for a in axes] for t in plan[1]]])))
        assert got.tolist() == [False]
