"""Identities of tuning records: an operator up to tensor names, a chip, an unmapped plan.

A record is found again by what it was measured for, whatever the model it came from: the
operator's structure (:meth:`TensorExpr.structure_key`), every field of the chip's spec, and the
plan without its placement on chips (the placement is chosen per context by
:func:`tvm_icca.plan_search.mapping.choose_core_order`). The tuner writes records under these keys
(:mod:`tvm_icca.tuning`) and the compiler reads them (:mod:`tvm_icca.records.apply`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.plan import ExecutionPlan

__all__ = ["expr_digest", "hardware_digest", "plan_signature", "task_key", "unmapped"]


def _digest(data: Any) -> str:
    text = data if isinstance(data, str) else json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def expr_digest(expr: TensorExpr) -> str:
    """Identity of an operator up to tensor names (:meth:`TensorExpr.structure_key`)."""
    return _digest(expr.structure_key())


def hardware_digest(hw: HardwareSpec) -> str:
    """Identity of a chip: every field of its spec (a preset and its SRAM-shrunk variant
    differ, although they may share a name)."""
    return _digest(hw.to_dict())


def task_key(expr: TensorExpr, hw: HardwareSpec) -> str:
    return _digest([expr_digest(expr), hardware_digest(hw)])


def unmapped(plan: ExecutionPlan) -> ExecutionPlan:
    """``plan`` without its placement on chips (core order, chips): what tuning searches; the
    placement is chosen per context by :func:`tvm_icca.plan_search.mapping.choose_core_order`."""
    return ExecutionPlan(dict(plan.op_partition), tuple(dict(t) for t in plan.temporal),
                         tuple(plan.loop_order))


def plan_signature(plan: ExecutionPlan) -> str:
    """Identity of an unmapped plan (dict order and factors of 1 do not matter)."""
    plan = unmapped(plan)
    return json.dumps([sorted((a, int(f)) for a, f in plan.op_partition.items() if int(f) != 1),
                       [sorted((a, int(f)) for a, f in t.items() if int(f) != 1) for t in plan.temporal],
                       list(plan.loop_order)], separators=(",", ":"))
