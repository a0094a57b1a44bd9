"""Tuning tasks: the distinct ICCA operators of a model, weighted by how often they run.

The model is compiled once by the one model-level compiler
(:func:`tvm_icca.drivers.device_programs.compile_programs`) with an observing plan hook (:mod:`tvm_icca.plan_search.plan_hook`): every
operator the compiler plans is reported with the chip, the SRAM budget its region leaves it
and the inputs it reads from HBM -- exactly the context in which a tuned plan will later be
applied. Operators with the same structure, chip and budget (the layers of a transformer)
are one task; its weight counts the operator's runs in one invocation of the model (its
region's calls from ``main``).

Each task also carries its workload for meta_schedule: the operator's own PrimFunc,
``te.create_prim_func`` over the TE the compiler composes from the region's composite
function (:func:`tvm_icca.ops.te_capture.compose_te`), so records are keyed the way meta_schedule
keys any TIR workload.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tvm import relax, te
from tvm.ir import IRModule

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.stream import input_sources
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass.state_place import per_operator_state
from tvm_icca.ops.te_capture import compose_te
from tvm_icca.partition.partitioner import icca_regions
from tvm_icca.plan_search import PlannedOp
from tvm_icca.plan_search.plan_hook import PlanRequest, plan_hook
from tvm_icca.progress import ProgressLike
from tvm_icca.records.keys import task_key, unmapped

__all__ = ["Task", "extract_tasks", "operator_workload", "output_block"]


@dataclass
class Task:
    """One distinct operator of a model on one chip.

    An operator planned in several contexts (layers whose regions leave it different SRAM)
    is one task: it is tuned within the smallest ``budget`` (a plan that fits it fits every
    context), and the compiler's own plan of every context is measured
    (``analytic_plans``), since a tuned plan is applied only where it beats that.
    """

    key: str
    name: str  # the first operator of the model with this structure ("<region>.op<k>")
    expr: TensorExpr
    hw: HardwareSpec
    budget: int
    hbm_inputs: tuple[int, ...]
    weight: int  # runs per model invocation
    analytic_plan: ExecutionPlan  # the compiler's own plan (unmapped)
    analytic_estimate_s: float  # the analytic cost model's time for it
    workload: IRModule | None = dataclasses.field(default=None, repr=False)
    analytic_plans: list[ExecutionPlan] = dataclasses.field(default_factory=list)
    #: inputs the Elk pass sees read from HBM (:func:`runtime_sim.contract.stream.input_sources` of
    #: the final program; the region planner's ``hbm_inputs`` may name fewer)
    elk_hbm_inputs: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        shape = "x".join(str(a.extent) for a in self.expr.axes)
        return f"{self.expr.kind}[{shape}]"


class _Recorder:
    """A plan hook that changes nothing and remembers what the compiler planned."""

    def __init__(self) -> None:
        self.seen: list[tuple[PlanRequest, PlannedOp]] = []

    def plan(self, request: PlanRequest, planned: PlannedOp) -> PlannedOp:
        self.seen.append((request, planned))
        return planned


def extract_tasks(model: Any, hw: HardwareSpec, *, preload: str | None = None,
                  progress: ProgressLike = False) -> list[Task]:
    """The tasks of ``model`` (a Relax module or a zoo workload) on ``hw``, heaviest first
    (weight x analytic time); ``progress``: the compile's bars (:mod:`tvm_icca.progress`)."""
    recorder = _Recorder()
    with plan_hook(recorder):
        # records are per operator: tune the per-operator planner's choices
        compiled = compile_programs(model, hw, preload=preload, progress=progress,
                                    state=per_operator_state(hw))
    runs: collections.Counter[str] = collections.Counter()
    elk_hbm: dict[str, tuple[int, ...]] = {}
    for program in compiled.programs:
        rows = input_sources(program, hw.hbm_bandwidth > 0)
        for op, row in zip(program.ops, rows):
            runs[op.name] += 1
            elk_hbm.setdefault(op.name, tuple(t for t, s in enumerate(row) if s == "hbm"))
    composites = _composites_by_op(compiled.module)
    tasks: dict[str, Task] = {}
    for request, planned in recorder.seen:
        key = task_key(request.expr, request.hw)
        task = tasks.get(key)
        plan = unmapped(planned.plan)
        if task is None:
            task = tasks[key] = Task(
                key, request.name, request.expr, request.hw, int(request.budget),
                tuple(request.hbm_inputs), 0, plan, float(planned.time_s),
                elk_hbm_inputs=elk_hbm.get(request.name, ()))
            composite = composites.get(request.name)
            if composite is not None:
                task.workload = operator_workload(composite)
        task.budget = min(task.budget, int(request.budget))
        if all(p != plan for p in task.analytic_plans):
            task.analytic_plans.append(plan)
        task.weight += runs.get(request.name, 0)
    ordered = [t for t in tasks.values() if t.weight > 0]
    ordered.sort(key=lambda t: -t.weight * t.analytic_estimate_s)
    for task in ordered:
        if task.workload is None:  # never expected: every planned operator has a composite
            raise RuntimeError(f"no composite function found for operator '{task.name}'")
    return ordered


def _composites_by_op(mod: IRModule) -> dict[str, relax.Function]:
    """``"<region>.op<k>"`` -> the composite function of the k-th composite call of the
    region (the numbering :func:`tvm_icca.lower.region.extract_region` gives operators)."""
    out: dict[str, relax.Function] = {}
    for name, func in icca_regions(mod).items():
        local: dict[relax.Var, relax.Function] = {}
        k = 0
        for block in func.body.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Function):
                    local[binding.var] = value
                elif isinstance(value, relax.Call) and value.op in local:
                    out[f"{name}.op{k}"] = local[value.op]
                    k += 1
    return out


def operator_workload(composite: relax.Function) -> IRModule:
    """The meta_schedule workload of an operator: its TE as a PrimFunc named ``main``."""
    composed = compose_te(composite)
    args = list(composed.placeholders) + [t for t, _ in composed.constants] + [composed.output]
    func = te.create_prim_func(args)
    return IRModule({"main": func})


def output_block(workload: IRModule) -> str:
    """Name of the block writing the workload's output (where the plan annotation goes)."""
    from tvm import s_tir  # pylint: disable=import-outside-toplevel

    func = workload["main"]
    out = func.params[-1]  # the output buffer (TVM 0.27 PrimFunc params are buffers)
    sch = s_tir.Schedule(workload)
    for block in reversed(sch.get_child_blocks(sch.get_sblock("root"))):
        stmt = sch.get(block)
        if any(_written(region).same_as(out) or str(_written(region).name) == str(out.name)
               for region in stmt.writes):
            return str(stmt.name_hint)
    raise RuntimeError("the workload's PrimFunc has no block writing its output")


def _written(region: Any) -> Any:
    """The buffer of a block's write region (``buffer`` before TVM 0.27, ``source`` since)."""
    return region.buffer if hasattr(region, "buffer") else region.source


def weights(tasks: Sequence[Task]) -> Mapping[str, int]:
    return {t.key: t.weight for t in tasks}
