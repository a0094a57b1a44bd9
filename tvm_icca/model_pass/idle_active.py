"""Idle and active plans for every operator of a model kept on chip (T10 §4.3.2, Algorithm 1).

When the whole model lives in the chip's SRAM, every operator's weights wait between runs in
an *idle* placement and the operator runs in an *active* plan; the setup phase moves the
weights from one to the other each time the operator runs. :func:`reconcile_regions` applies
:func:`tvm_icca.plan_search.reconcile.reconcile` to the operators of a partitioned model:

1. each operator gets its candidate plans (:func:`~tvm_icca.plan_search.reconcile.operator_options`:
   the time/memory and time/weight-bytes Pareto frontiers within the chip's SRAM); the same
   operator of every call of a region (a model's layers) is one decision with a count; its
   first budget is the SRAM left after the activation margin and the region's intermediates
   still held on chip when it runs, with every earlier operator in its fastest candidate
   (:func:`~tvm_icca.model_pass.region_plans.region_budgets`);
2. Algorithm 1 picks idle and active plans for all of them within the chip's memory, with the
   setup of an operator estimated as the weight bytes a core receives over its link.

The result is the operators' programs: ``plan`` the active plan, ``idle_plan`` the idle one
(``None`` when they coincide and the setup is free), and a per-operator table of decisions.
The timing simulator then times the setups as real re-layouts and holds the idle placements
in SRAM for the whole run.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from runtime_sim.contract.errors import PlanNotFoundError, short_name
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import IDLE_SPREAD
from runtime_sim.contract.program import OpProgram
from tvm_icca.lower.region import PendingOp, RegionOps
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.model_pass.region_plans import held_bytes, region_budgets
from tvm_icca.plan_search.reconcile import (
    OpOptions,
    PlanOption,
    Reconciliation,
    reconcile,
    transfer_setup,
)
from tvm_icca.progress import Phase

__all__ = ["OperatorDecision", "ModelPlan", "reconcile_regions"]


@dataclass(frozen=True)
class OperatorDecision:
    """What the reconciliation decided for one operator of a region (all its calls)."""

    name: str
    kind: str
    calls: int
    resident_tensors: int  # inputs kept on chip between runs (weights)
    options: int  # candidate plans considered
    idle_bytes: int  # per core, per call, of its resident tensors while idle
    active_bytes: int  # per core while it runs
    time_s: float  # estimated execution time of the active plan
    setup_s: float  # estimated setup (idle -> active) per run
    in_place: bool  # idles in its active plan: no setup

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ModelPlan:
    """Planned operators per region, and the decisions behind them."""

    ops: Mapping[str, list[OpProgram]]
    decisions: tuple[OperatorDecision, ...]
    reconciliation: Reconciliation
    capacity_bytes: int

    @property
    def estimated_time_s(self) -> float:
        return self.reconciliation.total_time_s

    def to_dict(self) -> dict[str, Any]:
        """The decisions as JSON-ready data (the planned operators are in the programs)."""
        r = self.reconciliation
        return {
            "capacity_bytes": self.capacity_bytes,
            "decisions": [d.to_dict() for d in self.decisions],
            "reconciliation": {"idle": dict(r.idle), "active": dict(r.active),
                               "total_time_s": r.total_time_s, "idle_bytes": r.idle_bytes,
                               "setup_s": dict(r.setup_s), "trace": [list(t) for t in r.trace]},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelPlan":
        r = d["reconciliation"]
        reconciliation = Reconciliation(
            idle=dict(r["idle"]), active=dict(r["active"]), total_time_s=float(r["total_time_s"]),
            idle_bytes=int(r["idle_bytes"]), setup_s=dict(r["setup_s"]),
            trace=tuple((int(b), float(t)) for b, t in r["trace"]))
        return cls(ops={}, decisions=tuple(OperatorDecision(**x) for x in d["decisions"]),
                   reconciliation=reconciliation, capacity_bytes=int(d["capacity_bytes"]))


def reconcile_regions(
    regions: Mapping[str, RegionOps],
    order: Sequence[str],
    resident_inputs: Mapping[str, frozenset[str]],
    hw: HardwareSpec,
    plan_cache: PlanCache | None = None,
    label: str = "model",
    phase: Phase | None = None,
) -> ModelPlan:
    """Idle and active plans of every operator of ``regions`` (called in ``order``).

    ``resident_inputs[region]`` names the region inputs that are model state kept on chip;
    ``hw`` is the chip as the plans see it (any activation margin already taken off its
    SRAM). Raises :class:`PlanNotFoundError` when the state and the smallest active plans
    cannot share the chip. ``phase`` counts the operators, then each one's options found
    (:mod:`tvm_icca.progress`).
    """
    cache = plan_cache if plan_cache is not None else PlanCache()
    calls = collections.Counter(order)
    entries: list[tuple[str, int, list[int]]] = []  # region, op index, resident tensor indices
    candidates: list[tuple[PlanOption, ...]] = []
    budgets: list[int] = []
    requests = []
    for region_name in dict.fromkeys(order):
        state = resident_inputs.get(region_name, frozenset())
        for op in regions[region_name].ops:
            requests.append((op.expr, _resident(op, state)))
    if phase is not None:
        phase.add(len(requests))
    cache.prefetch_options(requests, hw)
    for region_name in dict.fromkeys(order):
        region = regions[region_name]
        state = resident_inputs.get(region_name, frozenset())
        region_options: list[tuple[PlanOption, ...]] = []

        def fastest_within(op: PendingOp, budget: int) -> int:
            resident = _resident(op, state)
            options = cache.options(op.expr, hw, resident)
            region_options.append(options)
            entries.append((region_name, len(region_options) - 1, resident))
            if phase is not None:
                phase.step()
            return _fastest_output_bytes(op, options, budget, hw, cache)

        budgets.extend(region_budgets(region, hw, fastest_within))
        candidates.extend(region_options)
    capacity = hw.usable_sram_bytes
    # The budgets assume the intermediates of the stand-alone plans; the chosen active plans
    # may hold more, so the operators they squeeze get less and the choice is redone.
    for _ in range(_MAX_ROUNDS):
        # idle-only options (infinite time) stay whatever the budget
        options = [OpOptions(regions[r].ops[i].name,
                             tuple(o for o in opts if o.active_bytes <= b or math.isinf(o.time_s)),
                             count=calls[r], capacity=b)
                   for (r, i, _), opts, b in zip(entries, candidates, budgets)]
        result = _reconcile_grouped(options, candidates, capacity, hw)
        if not math.isfinite(result.total_time_s):
            break
        held = _held_by_choice(regions, entries, options, result)
        tighter = [min(b, capacity - h) for b, h in zip(budgets, held)]
        if tighter == budgets:
            break
        budgets = tighter
    else:
        result = dataclasses.replace(result, total_time_s=math.inf)
    if not math.isfinite(result.total_time_s):
        idle = [calls[r] * min((o.idle_bytes for o in opts), default=0)
                for (r, _, _), opts in zip(entries, candidates)]
        # the operator whose state takes the most, named with its tensors: where to look
        k = max(range(len(entries)), key=idle.__getitem__)
        region_name, i, resident = entries[k]
        op = regions[region_name].ops[i]
        state = ", ".join(f"'{short_name(op.expr.inputs[t].name)}' {list(op.expr.inputs[t].shape)} "
                          f"{op.expr.inputs[t].dtype}" for t in resident) or "none"
        raise PlanNotFoundError(
            f"model '{short_name(label)}' does not fit on chip '{hw.name}' ({hw.num_cores} cores): "
            f"its weights need at least {sum(idle)} bytes per core while idle, and with them not "
            f"every operator has a plan within the {capacity} bytes per core left for the "
            f"model; the operator holding the most is {op.describe()}: {idle[k]} bytes per "
            f"core for {state}"
        )
    planned: dict[str, list[OpProgram]] = {name: [] for name in dict.fromkeys(order)}
    decisions = []
    for (region_name, i, resident), op_options in zip(entries, options):
        op = regions[region_name].ops[i]
        idle_index, active_index = result.idle[op.name], result.active[op.name]
        active, idle = op_options.options[active_index], op_options.options[idle_index]
        in_place = idle_index == active_index or not resident
        planned[region_name].append(OpProgram(
            op.name, op.expr, active.label.plan, op.input_names, op.output_name, active.time_s,
            idle_plan=None if in_place else (idle.label if idle.label == IDLE_SPREAD
                                             else idle.label.plan), label=op.label))
        decisions.append(OperatorDecision(
            name=op.name, kind=op.expr.kind, calls=op_options.count,
            resident_tensors=len(resident), options=len(op_options.options),
            idle_bytes=idle.idle_bytes, active_bytes=active.active_bytes, time_s=active.time_s,
            setup_s=result.setup_s[op.name], in_place=in_place))
    return ModelPlan(planned, tuple(decisions), result, capacity)


def _reconcile_grouped(options: Sequence[OpOptions], candidates: Sequence[tuple[PlanOption, ...]],
                       capacity: int, hw: HardwareSpec) -> Reconciliation:
    """Algorithm 1 with identical operators as one decision (:class:`OpOptions` ``count``):
    the same candidates (same structure and state) within the same budget -- the layers of
    a model whose region holds all of them, as identical region calls already are. The
    result names every operator. A group switches plans as a whole, so the last step may
    leave room part of it could have used (BERT-large batch 1: 1.6% slower estimate than
    per-operator decisions); per operator, the greedy's steps grow with the number of
    layers (BERT-large: 56 s of Python, under a second grouped)."""
    groups: dict[tuple[int, int | None], list[int]] = {}
    for k, (op_options, cands) in enumerate(zip(options, candidates)):
        groups.setdefault((id(cands), op_options.capacity), []).append(k)
    grouped = [dataclasses.replace(options[ks[0]], count=sum(options[k].count for k in ks))
               for ks in groups.values()]
    result = reconcile(grouped, capacity, transfer_setup(hw.link_bandwidth))
    expanded = []
    for table in (result.idle, result.active, result.setup_s):
        # (an infeasible result decides nothing)
        expanded.append({options[k].name: table[group.name]
                         for group, ks in zip(grouped, groups.values()) if group.name in table
                         for k in ks})
    return dataclasses.replace(result, idle=expanded[0], active=expanded[1], setup_s=expanded[2])


def _resident(op: PendingOp, state: frozenset[str]) -> list[int]:
    """Indices of the inputs of ``op`` that are model state kept on chip."""
    return [t for t, name in enumerate(op.input_names) if name in state]


def _fastest_output_bytes(op: PendingOp, options: Sequence[PlanOption], budget: int,
                          hw: HardwareSpec, cache: PlanCache) -> int:
    """Output partition bytes per core of the fastest of ``options`` within ``budget``: the
    plan the operator would run in with no other operator to make room for, which is what
    the first budgets of the later operators of its region assume."""
    fitting = [o for o in options if o.active_bytes <= budget and math.isfinite(o.time_s)]
    if not fitting:
        # nothing fits: the stand-alone search names the operator and its smallest footprint
        planned = cache.plan(op.expr, hw, None, budget, op.describe())
        return planned.layout.partition_bytes(len(op.expr.tensors) - 1)
    fastest = min(fitting, key=lambda o: (o.time_s, o.active_bytes))
    return OpLayout(op.expr, fastest.label.plan).partition_bytes(len(op.expr.tensors) - 1)


#: Rounds of re-reconciliation after tightening budgets to the chosen plans' intermediates.
_MAX_ROUNDS = 6


def _held_by_choice(regions: Mapping[str, RegionOps], entries: Sequence[tuple[str, int, list[int]]],
                    options: Sequence[OpOptions], result: Reconciliation) -> list[int]:
    """Per entry, the intermediates its region holds while it runs, with the chosen plans."""
    out_bytes: dict[str, list[int]] = collections.defaultdict(list)
    for (region_name, i, _), op_options in zip(entries, options):
        active = op_options.options[result.active[op_options.name]]
        expr = regions[region_name].ops[i].expr
        layout = OpLayout(expr, active.label.plan)
        out_bytes[region_name].append(layout.partition_bytes(len(expr.tensors) - 1))
    held = {r: held_bytes(regions[r], b) for r, b in out_bytes.items()}
    return [held[r][i] for r, i, _ in entries]
