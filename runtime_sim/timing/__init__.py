"""The timing half of the simulated ICCA device: how long device programs take, shapes only.

:func:`simulate_timing` runs one model invocation (its regions, in order) through an
event-driven model of the chip (Elk §5 "Simulation framework"): per-core compute from the
shared op templates (:mod:`schedules`), inter-core shifts, replica reductions and re-layouts on
the chip's topology (:mod:`runtime_sim.machine.topology`), HBM and host loads with a simple prefetch
policy, or, when the programs carry one, Elk's preload/execute stream (§4.5: preloads in
their preload state, distribution, link sharing and the SRAM timeline). It never needs tensor data, and it is independent of the compiler's cost model
(:mod:`tvm_icca.plan_search.cost`): both use only the per-sub-task cycles of the templates.

Modules: :mod:`.simulate` (the entry point), :mod:`.work` (work items and their costing),
:mod:`.opcost` (one operator's phases), :mod:`.events`, :mod:`.prefetch_scheduler` (the prefetch
scheduler), :mod:`.preload_stream_scheduler` (Elk §4.5 streams), :mod:`.report_builder` and :mod:`.timing_report`
(the report), :mod:`.trace` (Perfetto traces), :mod:`.vgm_timing` (the VGM baseline). May import
:mod:`runtime_sim.contract`, :mod:`runtime_sim.machine` and :mod:`schedules`; never the
functional device. Start at :mod:`.simulate`.
"""

from runtime_sim.contract.relayout import (
    BlockGrid,
    Boxes,
    Flows,
    Relayout,
    canonical_grid,
    input_boxes,
    producer_grid,
    relayout,
    relayout_flows,
)
from runtime_sim.timing.opcost import OpCost, ShiftPhase, op_cost, phase_flows, shift_schedule
from runtime_sim.timing.timing_report import OpTiming, TimingReport
from runtime_sim.timing.simulate import simulate_timing

__all__ = [
    "BlockGrid", "Boxes", "Flows", "OpCost", "Relayout", "relayout", "OpTiming", "ShiftPhase", "TimingReport",
    "canonical_grid", "input_boxes", "op_cost", "phase_flows", "producer_grid",
    "relayout_flows", "shift_schedule", "simulate_timing",
]
