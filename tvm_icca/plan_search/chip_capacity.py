"""Whether an operator's tensors can fit a chip at all, and the words that explain a per-core
SRAM budget in the errors of the plan search (:mod:`tvm_icca.plan_search.search`).

A plan splits each tensor over at most every core, so a tensor larger than the budget times
the cores never fits, whatever the plan (T10 §4.4: each core holds its partitions in its own
SRAM); the search says so before it enumerates anything.
"""

from __future__ import annotations

from runtime_sim.contract.errors import PlanNotFoundError, operator_subject, short_name
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec

__all__ = ["budget_note", "check_fits_chip"]


def budget_note(hw: HardwareSpec, budget: int) -> str:
    """What the rest of a core's SRAM holds, so a budget below the chip's SRAM reads right."""
    if budget >= hw.sram_bytes_per_core:
        return ""
    held = hw.usable_sram_bytes - budget
    # a budget below the usable SRAM comes from the compiler (tensors its region keeps
    # live) or from the caller (budget_bytes): say what is true of both
    kept = (f" and {held} more bytes are outside this operator's budget (other tensors, such "
            "as those its region keeps live)") if held > 0 else ""
    return (f" (of {hw.sram_bytes_per_core} bytes of SRAM: the {hw.shift_buffer_bytes}-byte "
            f"shift buffer is reserved{kept})")


def check_fits_chip(expr: TensorExpr, hw: HardwareSpec, budget: int, label: str) -> None:
    """A tensor larger than the whole chip can never fit, whatever the plan. A gathered
    input counts the rows its ids pick (the gathered view the cores hold), not its table."""
    for t, access in enumerate(expr.tensors):
        size = expr.read_bytes(t)
        if size > budget * hw.num_cores:
            role = "output" if t == len(expr.inputs) else f"tensor '{short_name(access.name)}'"
            raise PlanNotFoundError(
                f"{operator_subject(label)}: {role} of shape {list(expr.access_shape(t))} {access.dtype} "
                f"({size} bytes) exceeds the on-chip memory of chip '{hw.name}' "
                f"({hw.num_cores} cores x {budget} bytes per core{budget_note(hw, budget)})"
            )
