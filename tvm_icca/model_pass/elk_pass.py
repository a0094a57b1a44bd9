"""The Elk pass of the model planner: HBM preload scheduling written into device programs.

On a chip with HBM every model larger than SRAM streams its weights and KV caches in while
operators run (Elk §2.2). After the region programs of a run are decided, this step:

1. builds every operator's trade-off table (:mod:`.tradeoff_tables`, Elk §4.3), once per
   distinct operator (identical layers share theirs);
2. asks the chosen design (:func:`tvm_icca.elk.designs.plan_preloads`: ``basic``,
   ``static``, ``elk-dyn``, ``elk-full`` or the ``ideal`` roofline, Elk §6.1) for each
   operator's execute-state plan and preload-state chunks, the preload order and how many
   preloads are issued before each execute; on a run of identical layers the design
   searches one period with the layers around it and expands its decisions
   (:mod:`tvm_icca.elk.period_reuse`, unless :attr:`~tvm_icca.model_pass.CompileOptions.reuse_layers`
   is off);
3. writes them into the programs: the chosen plan per operator, its
   :attr:`~runtime_sim.contract.program.OpProgram.preload_chunks`, and per region call the segment of
   the instruction stream issued while it runs (:class:`~runtime_sim.contract.program.PreloadSchedule`,
   Elk §4.5), preloads naming operators of later calls by their call offset.

Calls of one region that end up with different segments become different programs; the
planner's variant cloning gives each its own function (identical layers share one).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from runtime_sim.contract.errors import IccaError, PlanNotFoundError
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.plan import VgmPlan
from runtime_sim.contract.program import EXECUTE, PRELOAD, DeviceProgram, PreloadSchedule
from runtime_sim.contract.sram_budget import sram_budget
from tvm_icca.elk.designs import DESIGNS, plan_preloads
from tvm_icca.elk.elk_schedule import ElkSchedule
from tvm_icca.elk.period_reuse import plan_preloads_by_period
from tvm_icca.elk.tradeoffs import ElkMachine, OpTradeoffs
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.model_pass.tradeoff_tables import operator_tables
from tvm_icca.progress import NO_PROGRESS, Progress

__all__ = ["PRELOAD_DESIGNS", "DEFAULT_HBM_DESIGN", "PreloadSummary", "schedule_preloads"]

#: The designs a user may choose (Elk §6.1); what each one does:
#: :class:`~tvm_icca.model_pass.CompileOptions` (``preload``) and :mod:`tvm_icca.elk.designs`.
PRELOAD_DESIGNS: tuple[str, ...] = tuple(DESIGNS)
#: The design used on a chip with HBM unless the user picks another (the issue's default).
DEFAULT_HBM_DESIGN = "elk-full"


@dataclass(frozen=True)
class PreloadSummary:
    """What the Elk pass decided, for reports: the compiler's own estimate, not a timing."""

    design: str
    estimated_s: float
    planning_s: float
    num_ops: int
    preloads: int
    stats: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PreloadSummary":
        return cls(**d)


def schedule_preloads(programs: Sequence[DeviceProgram], hw: HardwareSpec, cache: PlanCache,
                      design: str, progress: Progress = NO_PROGRESS, *, reuse_layers: bool = True,
                      group_pieces: bool = True) -> tuple[list[DeviceProgram], PreloadSummary]:
    """``programs`` (one per region call, in order) with ``design``'s preload schedule;
    ``progress``: a phase for the trade-off tables (per operator), one for the design's search
    (per candidate schedule estimated). ``reuse_layers``: search one period of the run's
    identical layers and expand it (:func:`tvm_icca.elk.period_reuse.plan_preloads_by_period`),
    else the whole run (:func:`tvm_icca.elk.designs.plan_preloads`). ``group_pieces``: the
    refinement's classes follow the pieces' repeats too (:func:`tvm_icca.elk.refine.local_search`)."""
    if design not in PRELOAD_DESIGNS:
        raise IccaError(f"unknown preload design {design!r}; choose one of {PRELOAD_DESIGNS}")
    if hw.hbm_bandwidth <= 0:
        raise IccaError(f"preload design {design!r} needs a chip with HBM; '{hw.name}' has none")
    if any(isinstance(op.plan, VgmPlan) for p in programs for op in p.ops):
        raise IccaError("HBM preload scheduling applies to compute-shift (t10) programs, not VGM ones")
    wall = time.perf_counter()
    with progress.phase("trade-off tables", unit="op") as phase:
        tables = operator_tables(programs, hw, cache, phase)
    # the device's SRAM rule: what the windows below may hold is what the device admits
    budget = sram_budget(hw, design)
    machine = ElkMachine(sram_bytes=budget.execution_bytes, separate_interconnect=design == "ideal",
                         preload_sram_bytes=budget.preload_bytes if budget.separate else None)
    with progress.phase(f"preload schedule ({design})", unit="candidate") as phase:
        plan = plan_preloads_by_period if reuse_layers else plan_preloads
        try:
            schedule = plan(tables, machine, design, on_step=phase.step, group_pieces=group_pieces)
        except ValueError as err:   # the designs' "does not fit" (InfeasibleError among them)
            raise PlanNotFoundError(
                f"preload design {design!r} finds no schedule whose windows fit chip '{hw.name}' "
                f"({budget.execution_bytes} bytes per core beside the shift buffer): {err}") from err
    out = _apply(programs, tables, schedule)
    summary = PreloadSummary(design=design, estimated_s=float(schedule.total_s),
                             planning_s=time.perf_counter() - wall, num_ops=len(tables),
                             preloads=sum(len(p.preload_schedule.stream) - len(p.ops) for p in out),
                             stats=dataclasses.asdict(schedule.stats))
    return out, summary


def _apply(programs: Sequence[DeviceProgram], tables: Sequence[OpTradeoffs],
           schedule: ElkSchedule) -> list[DeviceProgram]:
    where: list[tuple[int, int]] = [(c, j) for c, p in enumerate(programs) for j in range(len(p.ops))]
    segments: list[list[tuple]] = [[] for _ in programs]
    issued = 0
    for i, (call, j) in enumerate(where):
        # the preload order holds exactly the operators that load something off chip
        while issued < schedule.horizon[i]:
            tc, tj = where[schedule.preload_order[issued]]
            issued += 1
            segments[call].append((PRELOAD, tc - call, tj))
        segments[call].append((EXECUTE, j))
    out: list[DeviceProgram] = []
    flat = 0
    for call, program in enumerate(programs):
        ops = []
        for op in program.ops:
            table = tables[flat]
            e = schedule.exec_choice[flat]
            point = table.execs[e]
            chunks: tuple = ()
            if table.preloads and table.preloads[e]:
                k = schedule.preload_choice[flat]
                chunks = tuple(table.preloads[e][k].chunks) if k >= 0 else ()
            ops.append(dataclasses.replace(op, plan=point.plan.plan, estimated_time_s=float(point.time_s),
                                           preload_chunks=chunks, tuned=point.plan.tuned))
            flat += 1
        out.append(dataclasses.replace(
            program, ops=tuple(ops),
            preload_schedule=PreloadSchedule(schedule.design, tuple(segments[call]))))
    return out
