"""Whether a given plan can run an operator within a per-core budget: the device's layout rules,
the chip's cores and the budget (T10 §4.4). Used where a plan comes from outside the search
(tuning records, measured plans) and must be checked before it is used.
"""

from __future__ import annotations

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan

__all__ = ["fits"]


def fits(expr: TensorExpr, plan: ExecutionPlan, hw: HardwareSpec, budget: int) -> str | None:
    """Why ``plan`` cannot run ``expr`` on ``hw`` within ``budget`` bytes per core (None: it
    can): the layout rules of the device (:meth:`OpLayout.validate`), the chip's cores and
    the budget."""
    try:
        layout = OpLayout(expr, plan, hw.cores_per_chip)
        layout.validate()
    except IccaError as err:
        return str(err)
    if layout.num_cores > hw.num_cores:
        return f"the plan uses {layout.num_cores} cores, '{hw.name}' has {hw.num_cores}"
    memory = layout.memory_bytes_per_core()
    if memory > budget:
        return f"the plan needs {memory} bytes per core, the budget is {budget}"
    return None
