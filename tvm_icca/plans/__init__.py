"""rTensor execution plans: plan space, cost models and the search (T10 §4.1-§4.3)."""

from .cost import AnalyticCostModel, CostModel, PlanCost, transfer_seconds
from .rtensor import rotating_tensors
from .search import PlannedOp, plan_operator

__all__ = [
    "AnalyticCostModel", "CostModel", "PlanCost", "PlannedOp", "plan_operator",
    "rotating_tensors", "transfer_seconds",
]
