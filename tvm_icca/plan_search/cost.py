"""Cost of a compute-shift execution plan.

The analytic model follows the structure T10 uses for its cost model (§4.3.1): per-core
compute of one sub-task times the number of steps, plus the time to shift partitions over
each core's link, plus the final reduction of output replicas. The per-sub-task compute
comes from the op's template in :mod:`schedules`. Any callable with the :class:`CostModel`
signature can replace it (T10 exposes the same hook for custom cost functions); a fitted
model arrives with the optimizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.machine.links import link_transfer_seconds
from tvm_icca.plan_search.batch_cost import AnalyticBatchModel
from tvm_icca.plan_search.structure import PlanStructure, build_structure


@dataclass(frozen=True)
class PlanCost:
    """Estimated time of one operator under one plan, by component, in seconds.

    Attributes
    ----------
    compute_s : float
        The sub-tasks on the compute array, every step.
    sync_s : float
        The synchronization that ends each bulk-synchronous step.
    shift_s : float
        The rotations between steps (T10 §4.2).
    reduction_s : float
        Summing the output replicas of a split reduction axis after the last step.
    epilogue_s : float
        Fused elementwise epilogues (bias, activation).
    """

    compute_s: float
    sync_s: float
    shift_s: float
    reduction_s: float
    epilogue_s: float

    @property
    def time_s(self) -> float:
        """The total: the sum of the components."""
        return self.compute_s + self.sync_s + self.shift_s + self.reduction_s + self.epilogue_s


class CostModel(Protocol):
    def __call__(self, layout: OpLayout, hw: HardwareSpec) -> PlanCost: ...


def transfer_seconds(nbytes: int, hw: HardwareSpec) -> float:
    """One core receiving ``nbytes`` over its link, in shift-buffer sized pieces (T10 §5)."""
    return link_transfer_seconds(nbytes, hw)


class AnalyticCostModel:
    """Closed-form plan cost from the HardwareSpec (no overlap of compute and shifts).

    The terms are :class:`.batch_cost.AnalyticBatchModel`'s, evaluated on a one-plan batch
    under the layout's loop order: one definition for the search and for single layouts.
    """

    def __init__(self) -> None:
        # The last expression's structure and the last hardware's batch model: layouts of
        # one operator come in runs (re-ranking, brute force), and both cost more than a plan.
        self._model: AnalyticBatchModel | None = None
        self._structure: PlanStructure | None = None

    def __call__(self, layout: OpLayout, hw: HardwareSpec) -> PlanCost:
        if self._model is None or self._model.hw != hw:
            self._model = AnalyticBatchModel(hw)
        if self._structure is None or self._structure.expr is not layout.expr:
            self._structure = build_structure(layout.expr)
        return PlanCost(**self._model.layout_terms(layout, self._structure))
