"""Cost of a compute-shift execution plan.

The analytic model follows the structure T10 uses for its cost model (§4.3.1): per-core
compute of one sub-task times the number of steps, plus the time to shift partitions over
each core's link, plus the final reduction of output replicas. The per-sub-task compute
comes from the op's template in :mod:`schedules`. Any callable with the :class:`CostModel`
signature can replace it (T10 exposes the same hook for custom cost functions); a fitted
model arrives with the optimizer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from runtime_sim.hardware import HardwareSpec
from runtime_sim.layout import OpLayout
from schedules import template_for


@dataclass(frozen=True)
class PlanCost:
    """Estimated time of one operator under one plan, by component, in seconds."""

    compute_s: float
    sync_s: float
    shift_s: float
    reduction_s: float
    epilogue_s: float

    @property
    def time_s(self) -> float:
        return self.compute_s + self.sync_s + self.shift_s + self.reduction_s + self.epilogue_s


class CostModel(Protocol):
    def __call__(self, layout: OpLayout, hw: HardwareSpec) -> PlanCost: ...


def transfer_seconds(nbytes: int, hw: HardwareSpec) -> float:
    """One core receiving ``nbytes`` over its link, in shift-buffer sized pieces (T10 §5)."""
    if nbytes <= 0:
        return 0.0
    pieces = math.ceil(nbytes / hw.shift_buffer_bytes)
    return nbytes / hw.link_bandwidth + pieces * hw.link_latency_s


def shift_seconds(layout: OpLayout, hw: HardwareSpec) -> float:
    """Per-core time of all rotations of a plan: each shift of a partition over the link."""
    total = 0.0
    for t in range(len(layout.expr.tensors)):
        size = layout.partition_bytes(t)
        for a in layout.temporal_axes(t):
            total += layout.shift_count_per_core(t, a) * transfer_seconds(size, hw)
    return total


class AnalyticCostModel:
    """Closed-form plan cost from the HardwareSpec (no overlap of compute and shifts)."""

    def __call__(self, layout: OpLayout, hw: HardwareSpec) -> PlanCost:
        expr = layout.expr
        template = template_for(expr.kind)
        cycles = template.subtask_cycles(expr, layout.rp, hw)
        compute_s = layout.steps * cycles / hw.clock_hz
        sync_s = layout.steps * hw.sync_cycles / hw.clock_hz
        shift_s = shift_seconds(layout, hw)
        out = len(expr.tensors) - 1
        replicas = layout.replicas(out)
        # Summing R replicas costs each core (R-1)/R of a partition on its link when the
        # reduction is spread over the ring (the T10 benchmark's final-reduction term).
        reduction_s = (replicas - 1) / replicas * layout.partition_bytes(out) / hw.link_bandwidth
        out_partition = {
            a: layout.xp[a] // layout.plan.ft(out, a) for a in layout.axes
        }
        epilogue_s = template.epilogue_cycles(expr, out_partition, hw) / hw.clock_hz
        return PlanCost(compute_s, sync_s, shift_s, reduction_s, epilogue_s)
