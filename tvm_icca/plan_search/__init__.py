"""Stage 4, the plan search: rTensor plans of one operator, cost models, search (T10 §4.1-§4.3).

* :mod:`.structure` -- what plans of one operator depend on, as arrays (:class:`PlanStructure`);
* :mod:`.plan_space` -- the complete plan space of an operator: F_op rows, f_t assignments,
  candidate batches (vectorized); :mod:`.bounds` -- lower bounds per F_op row;
  :mod:`.space_size` -- the size of the complete space, counted; :mod:`.filters` -- T10's
  search constraints (:class:`PlanFilters`); :mod:`.search_memo` -- the caller-owned memo;
* :mod:`.cost` / :mod:`.batch_cost` -- the analytic cost model, per layout and vectorized;
  :mod:`.rotation_cover` -- the least bytes a fitting plan must rotate (a bound of its shifts);
* :mod:`.scoring` -- scoring candidates in bounded batches (shared by the searches);
* :mod:`.search` -- exact branch-and-bound searches, :func:`plan_operator`;
* :mod:`.pareto` -- per-operator time/memory Pareto plans (§4.3.1);
* :mod:`.reconcile` -- inter-operator memory reconciliation, Algorithm 1 (§4.3.2);
* :mod:`.t10_bench` -- the T10 benchmark matmul model and its exact optimum;
* :mod:`.mapping` -- placing a plan on chips near its producers and HBM data;
* :mod:`.fit` -- whether a given plan fits an operator within a budget;
* :mod:`.plan_hook` -- the interface through which tuning records reach the planner (the
  compiler owns it; :mod:`tvm_icca.records` and :mod:`tvm_icca.tuning` install hooks).

Plain Python and numpy: no TVM. May import :mod:`runtime_sim.contract`,
:mod:`runtime_sim.machine` and :mod:`schedules`. Start at :mod:`.search`.
"""

from tvm_icca.plan_search.batch_cost import AnalyticBatchModel, BatchCostModel
from tvm_icca.plan_search.cost import AnalyticCostModel, CostModel, PlanCost, transfer_seconds
from tvm_icca.plan_search.filters import PlanFilters
from tvm_icca.plan_search.pareto import ParetoPlan, pareto_plans, space_sizes
from tvm_icca.plan_search.reconcile import (
    OpOptions,
    PlanOption,
    Reconciliation,
    reconcile,
    transfer_setup,
)
from tvm_icca.plan_search.rtensor import rotating_tensors
from tvm_icca.plan_search.search import PlannedOp, plan_operator
from tvm_icca.plan_search.search_memo import SearchMemo, plan_structure
from tvm_icca.plan_search.space_size import SpaceSizes, count_complete_space

__all__ = [
    "AnalyticBatchModel", "AnalyticCostModel", "BatchCostModel", "CostModel", "OpOptions",
    "ParetoPlan", "PlanCost", "PlanFilters", "SearchMemo", "PlanOption", "PlannedOp", "Reconciliation",
    "SpaceSizes", "count_complete_space", "pareto_plans", "plan_operator", "plan_structure",
    "reconcile", "rotating_tensors", "space_sizes", "transfer_seconds", "transfer_setup",
]
