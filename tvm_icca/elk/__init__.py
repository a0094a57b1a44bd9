"""Stage 5 (beside the model pass), Elk (MICRO'25) scheduling on trade-off tables; no TVM.

Modules: :mod:`.tradeoffs` (input tables), :mod:`.overlap_model` (the one memory/time model),
:mod:`.inductive` (two-level inductive scheduling, §4.2 + Appendix A), :mod:`.allocation`
(cost-aware on-chip memory allocation, §4.3), :mod:`.reorder` (preload order permutation, §4.4),
:mod:`.elk_schedule` (a schedule and its forward estimate), :mod:`.draft` (chosen points as an
estimated schedule, preloads as early as SRAM allows), :mod:`.inductive_draft` (the recurrence
with the allocation's window times, §4.2 + §4.3), :mod:`.refine` (the points refined against the
estimate), :mod:`.designs` (Basic / Static / Elk-Dyn / Elk-Full / Ideal of §6.1),
:mod:`.synthetic` (LLM-like tables for tests and benchmarks). The tables are built from a
model's device programs by :mod:`tvm_icca.model_pass.tradeoff_tables`; the stream's timing rules
come from :mod:`runtime_sim.machine.stream_timing`. Start at :mod:`.designs`.
"""

from tvm_icca.elk.designs import DESIGNS, plan_preloads
from tvm_icca.elk.inductive import InfeasibleError
from tvm_icca.elk.elk_schedule import ElkSchedule, PlanStats, Timeline, estimate
from tvm_icca.elk.tradeoffs import ElkMachine, ExecPoint, OpTradeoffs, PreloadPoint

__all__ = ["DESIGNS", "ElkMachine", "ElkSchedule", "ExecPoint", "InfeasibleError", "OpTradeoffs",
           "PlanStats", "PreloadPoint", "Timeline", "estimate", "plan_preloads"]
