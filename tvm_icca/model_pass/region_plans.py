"""Plans for the operators of one region, within the SRAM the region leaves each of them.

:func:`plan_region` searches each operator's rTensor execution plan (:mod:`tvm_icca.plan_search`,
T10 §4.3) within the per-core budget its region leaves it (:func:`region_budgets`, from the
tensor lifetimes of :mod:`runtime_sim.contract.lifetimes`); :func:`compile_region` lowers a
region (:func:`tvm_icca.lower.region.extract_region`) and plans it into its device program.
The model-level pass (:mod:`tvm_icca.model_pass.planner`) calls these for every region of a
model; nothing else compiles regions.
"""

from __future__ import annotations

import json
from typing import Callable, Collection, Mapping, Sequence

from tvm import relax

from runtime_sim.contract.errors import IccaError, PlanNotFoundError, short_name
from runtime_sim.contract.expr import TensorExpr, tensor_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.lifetimes import HeldBytes, held_beside_later
from runtime_sim.contract.lifetimes import held_bytes as lifetime_held_bytes
from runtime_sim.contract.program import DeviceProgram, OpProgram
from schedules import template_for
from schedules.base import compute_dtype
from tvm_icca.lower.region import PendingOp, RegionOps, extract_region
from tvm_icca.model_pass.departures import improve_departures
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.plan_search import CostModel, PlannedOp, plan_operator
from tvm_icca.plan_search.departure import Departure, plan_departing
from tvm_icca.plan_search.mapping import arrival_seconds
from tvm_icca.plan_search.plan_hook import PlanRequest, planned_with_hook
from tvm_icca.plan_search.vgm import plan_vgm_operator
from tvm_icca.progress import Phase
from tvm_icca.split import (
    PIECE_FILL,
    choose_splits,
    is_join,
    original_operator,
    pressure_root,
    split_region,
    twin_groups,
)

#: Execution models a region can be compiled for.
EXECUTION_MODELS = ("t10", "vgm")


def compile_region(
    func: relax.Function,
    name: str,
    hw: HardwareSpec,
    cost_model: CostModel | None = None,
    plan_cache: PlanCache | None = None,
    execution: str = "t10",
    vgm_region_bytes: int | None = None,
    hbm_params: Sequence[int] = (),
    hbm_constants: bool = False,
    host_reads: Collection[int] = (),
    phase: Phase | None = None,
) -> DeviceProgram:
    """Plan every operator of ``func`` and return the region's device program.

    ``plan_cache`` shares plans and tensor expressions with other regions (see
    :class:`PlanCache`); without it every operator is extracted and planned afresh.
    ``execution`` selects the execution model: ``"t10"`` (compute-shift plans, the backend's
    own) or ``"vgm"`` (the load-compute-store baseline on a virtual global memory, T10 §2.2,
    with ``vgm_region_bytes`` reserved per core). ``hbm_params``: positions of the parameters
    the region reads from HBM (model state on a chip with HBM), and ``hbm_constants`` whether
    its constants come from there too: the mapping of plans to chips keeps them from being
    read once per chip (:mod:`.plans.mapping`). ``host_reads``: the indices of the outputs
    the host reads after every call (-1: all), which leave the chip as they are produced.
    ``phase`` counts the region's operators, then each one planned (:mod:`tvm_icca.progress`).
    """
    if execution not in EXECUTION_MODELS:
        raise IccaError(f"unknown execution model '{execution}'; choose one of {EXECUTION_MODELS}")
    region = extract_region(func, name, hw, plan_cache.exprs if plan_cache is not None else None
                            ).with_host_reads(host_reads)
    if phase is not None:
        phase.add(len(region.ops))
    if execution == "vgm":
        ops = []
        for op in region.ops:
            ops.append(_plan_vgm(op, hw, vgm_region_bytes))
            if phase is not None:
                phase.step()
    else:
        hbm = {region.inputs[i].name for i in hbm_params} | (set(region.constants) if hbm_constants else set())
        region, ops = plan_split_region(region, hw, cost_model, plan_cache, frozenset(hbm), phase)
    return region.program(hw, ops)


def _plan_vgm(op: PendingOp, hw: HardwareSpec, region_bytes: int | None) -> OpProgram:
    planned = plan_vgm_operator(op.expr, hw, vgm_region_bytes=region_bytes, name=op.describe())
    return OpProgram(op.name, op.expr, planned.plan, op.input_names, op.output_name,
                     planned.estimated_time_s, label=op.label)


#: Rounds of splitting and planning a region: each round splits, or splits finer, an
#: operator the previous round found no plan for (and its twins in the other layers,
#: :mod:`tvm_icca.split.twins`), or spreads the outputs the region holds.
MAX_SPLIT_ROUNDS = 8

#: How many times its even spread over the chip's cores an output may take per core while
#: the region holds it beside later operators, once a region is planned with its held
#: outputs spread (:func:`plan_split_region`). A plan partitions the output on a grid of
#: cores whose sides divide its dimensions only roughly (5,888 cores = 2^8 x 23 on
#: ``ipu-pod4-hbm``), so the exact spread is rarely a plan; twice it leaves the grid room.
HELD_SPREAD = 2


def plan_split_region(
    region: RegionOps, hw: HardwareSpec, cost_model: CostModel | None = None,
    plan_cache: PlanCache | None = None, hbm_names: frozenset[str] = frozenset(),
    phase: Phase | None = None,
) -> tuple[RegionOps, list[OpProgram]]:
    """Split the operators that cannot fit the chip (:mod:`tvm_icca.split`), then plan the
    region (:func:`plan_region`); returns the region as split and its planned operators.

    An operator the planner finds no plan for is split (or split finer) and the region
    planned again, up to :data:`MAX_SPLIT_ROUNDS` times; then the planner's error stands.
    Each decision reaches the operator's twins in the region's other layers
    (:func:`~tvm_icca.split.twins.twin_groups`).

    When an operator fails with less than :data:`PIECE_FILL` of the SRAM left by the
    region's intermediates, the region is first planned again with those intermediates
    spread over the cores (``plan_region(spread_held=True)``: a plan that writes a
    long-lived output onto few cores in large partitions takes that SRAM from every operator
    it outlives). When an operator already split still fails so, the operator is not the
    problem: the chain that holds the intermediates is cut instead
    (:func:`~tvm_icca.split.pressure_root`), in twice as many pieces each time it fails again.
    """
    def plan_piece(expr: TensorExpr, budget: int, name: str, arriving: tuple[int, ...] = ()) -> float:
        planned = _search(expr, hw, cost_model, plan_cache, budget, name, arriving=arriving)
        # each piece of a cut operator lays out again what it reads: the cut is weighed with
        # those arrivals (split_choice.causal_split), which an operator's own time leaves out
        return planned.time_s + arrival_seconds(planned.layout, hw, arriving)

    index = {op.name: i for i, op in enumerate(region.ops)}
    twins = twin_groups(region)
    spread = False
    forced: dict[int, int] = {}
    pressure: dict[int, tuple[str, int]] = {}
    last: PlanNotFoundError | None = None
    counted = len(region.ops)  # operators the progress phase was told of
    for _ in range(MAX_SPLIT_ROUNDS):
        choices = choose_splits(region, hw, plan_piece, forced, hbm_names, pressure)
        split = split_region(region, choices)
        if phase is not None and len(split.ops) > counted:
            phase.add(len(split.ops) - counted)
            counted = len(split.ops)
        try:
            return split, plan_region_departing(split, hw, cost_model, plan_cache, hbm_names,
                                                phase, spread_held=spread)[0]
        except PlanNotFoundError as err:
            name = err.operator
            failed = index.get(original_operator(name))
            last = err
            squeezed = 0 < err.budget_bytes < hw.usable_sram_bytes * PIECE_FILL
            if squeezed and not spread:
                spread = True  # first let the held intermediates take less of every core
                continue
            # cutting the operator finer did not help, and the region's intermediates leave it
            # little: cut the chain that holds them; a piece of that chain that fails cuts
            # the chain finer
            squeezed = squeezed and (failed in forced or bool(pressure))
            root = pressure_root(region, failed) if squeezed else None
            if root is None and failed is not None:
                root = _chain_of(split, name, failed, pressure)
            if root is not None:
                op, axis = root
                pieces = pressure[op][1] * 2 if op in pressure else 2
                if pieces <= region.ops[op].expr.extent(axis):
                    for twin in twins[op]:
                        pressure[twin] = (axis, pieces)
                    # the operators cut finer for their own sake would not follow the chain
                    forced.clear()
                    continue
            pieces = next((c.pieces for c in choices if c.op == failed), 1)
            if failed is None or is_join(name) or forced.get(failed, 0) > pieces:
                raise  # nothing left to split: the first error is the answer
            for twin in twins[failed]:
                forced[twin] = pieces * 2
    raise PlanNotFoundError(f"{last} (and still after splitting operators of region "
                            f"'{short_name(region.name)}' {MAX_SPLIT_ROUNDS} times)")


def _chain_of(split: RegionOps, name: str, failed: int,
              pressure: dict[int, tuple[str, int]]) -> tuple[int, str] | None:
    """The memory-pressure cut (root, axis) whose chain the failed piece ``name`` (of the
    region's operator ``failed``) follows: one at or before it with as many pieces."""
    original = original_operator(name)
    if original == name:
        return None
    pieces = sum(1 for op in split.ops if original_operator(op.name) == original
                 and not is_join(op.name))
    return next(((op, axis) for op, (axis, n) in sorted(pressure.items(), reverse=True)
                 if op <= failed and n == pieces), None)


def plan_region_departing(
    region: RegionOps, hw: HardwareSpec, cost_model: CostModel | None = None,
    plan_cache: PlanCache | None = None, hbm_names: frozenset[str] = frozenset(),
    phase: Phase | None = None, spread_held: bool = False,
) -> tuple[list[OpProgram], list[int]]:
    """:func:`plan_region`, then, in a compute-bound region planned with the default cost
    model, its producers planned again with their readers' arrivals in view where that
    shortens the region's estimated time (:func:`.departures.improve_departures`)."""
    first = plan_region(region, hw, cost_model, plan_cache, hbm_names, phase, spread_held)
    if cost_model is not None or not compute_bound(region, hw, hbm_names):
        return first  # arrivals are not priced: nothing for a departure to save
    memo = plan_cache.search if plan_cache is not None else None

    def improve() -> tuple[list[OpProgram], list[int]]:
        return improve_departures(
            region, hw, hbm_names, first,
            lambda departures: plan_region(region, hw, None, plan_cache, hbm_names, None,
                                           spread_held, departures),
            memo, held_output_caps(region, hw) if spread_held else {})

    if memo is None:
        return improve()
    # the trials are a function of the region, the chip and its first plans: a model compiled
    # again with the same plan cache (the designs of one sweep, tvm.compile then
    # compile_programs) gets them answered, as the searches they consist of are
    key = ("departures", _region_key(region), json.dumps(hw.to_dict(), sort_keys=True),
           tuple(sorted(hbm_names)), spread_held,
           tuple(json.dumps(op.plan.to_dict(), sort_keys=True) for op in first[0]))
    return memo.planned_once(key, improve)


def _region_key(region: RegionOps) -> tuple:
    """What a region's planning depends on: its operators' structures and their wiring."""
    return (region.name, tuple((op.name, op.expr.structure_key(views=True), op.input_names,
                                op.output_name) for op in region.ops),
            tuple(region.outputs), tuple(region.staying_outputs))


def plan_region(
    region: RegionOps, hw: HardwareSpec, cost_model: CostModel | None = None,
    plan_cache: PlanCache | None = None, hbm_names: frozenset[str] = frozenset(),
    phase: Phase | None = None, spread_held: bool = False,
    departures: Mapping[str, tuple[Departure, ...]] | None = None,
) -> tuple[list[OpProgram], list[int]]:
    """Plan the operators in order, leaving room for intermediates that stay on chip.

    The device keeps an operator's output on the cores that own it until its last reader has
    run (region outputs until the region ends), so while operator ``i`` runs, every earlier
    output still needed after ``i`` occupies up to one partition per core (see
    :func:`held_bytes`). Its plan gets the SRAM that remains: that budget is returned per
    operator, with the planned operators. ``hbm_names``: the region tensors read from HBM.
    Each operator's placement on the chips sees the layouts of the earlier operators whose
    outputs it reads (:func:`.plans.mapping.choose_core_order`). ``phase``: a step per
    operator planned. ``spread_held``: an output held while later operators run may take at
    most :data:`HELD_SPREAD` times its even spread over the cores. ``departures``: per
    operator name, its readers' arrivals its plan is searched with
    (:func:`~tvm_icca.plan_search.departure.plan_departing`; default cost model only).
    """
    ops: list[OpProgram] = []
    layouts: dict[str, OpLayout] = {}  # output name -> its producer's layout
    priced = compute_bound(region, hw, hbm_names)
    caps = held_output_caps(region, hw) if spread_held else {}

    def plan_one(op: PendingOp, budget: int) -> int:
        hbm = tuple(t for t, n in enumerate(op.input_names) if n in hbm_names)
        producers = tuple((t, layouts[n]) for t, n in enumerate(op.input_names)
                          if n in layouts and t not in hbm)
        arriving = tuple(t for t, _ in producers) if priced else ()

        def search(cap: int | None) -> PlannedOp:
            if departures and op.name in departures and cost_model is None:
                return plan_departing(op.expr, hw, departures[op.name], budget, op.describe(),
                                      plan_cache.search if plan_cache is not None else None,
                                      hbm, producers, arriving, cap)
            return _search(op.expr, hw, cost_model, plan_cache, budget, op.describe(), hbm,
                           producers, arriving, cap)

        cap = caps.get(op.name)
        try:
            try:
                planned = search(cap)
            except PlanNotFoundError:
                if cap is None:
                    raise
                planned = search(None)  # an output too small to spread keeps the plans it has
        except PlanNotFoundError as err:
            # which operator, and what its region left it: plan_split_region splits it, or the
            # producers of what the region holds, and tries again
            err.operator, err.budget_bytes = op.name, budget
            raise
        # tuning records (tvm_icca.use_database) may replace the plan; no-op otherwise
        own = planned
        planned = planned_with_hook(PlanRequest(op.name, op.expr, hw, budget, hbm, producers), planned)
        layouts[op.output_name] = OpLayout(op.expr, planned.plan, hw.cores_per_chip)
        ops.append(OpProgram(op.name, op.expr, planned.plan, op.input_names, op.output_name,
                             planned.time_s, label=op.label, tuned=planned is not own))
        if phase is not None:
            phase.step()
        return planned.layout.partition_bytes(len(op.expr.tensors) - 1)

    budgets = region_budgets(region, hw, plan_one)
    return ops, budgets


def _search(expr: TensorExpr, hw: HardwareSpec, cost_model: CostModel | None,
            plan_cache: PlanCache | None, budget: int, name: str, hbm: tuple[int, ...] = (),
            producers: tuple = (), arriving: tuple[int, ...] = (),
            output_cap: int | None = None) -> PlannedOp:
    """One operator's plan search within ``budget``: through the plan cache when there is one."""
    if plan_cache is not None:
        return plan_cache.plan(expr, hw, cost_model, budget, name, hbm, producers, arriving,
                               output_cap)
    return plan_operator(expr, hw, cost_model=cost_model, budget_bytes=budget, name=name,
                         hbm_inputs=hbm, producers=producers, arriving=arriving,
                         output_cap=output_cap)


def held_output_caps(region: RegionOps, hw: HardwareSpec) -> dict[str, int]:
    """Operator name -> the most bytes per core its output may take when the region holds it
    while later operators run (:data:`HELD_SPREAD` times its even spread over the cores;
    the lifetimes of :mod:`runtime_sim.contract.lifetimes`). An output read only by the next
    operator is not held beside any other and gets no cap."""
    caps = {}
    for i in held_beside_later([op.input_names for op in region.ops],
                               [op.output_name for op in region.ops], region.staying_outputs):
        out = region.ops[i].expr.output
        caps[region.ops[i].name] = HELD_SPREAD * -(-tensor_bytes(out.shape, out.dtype) // hw.num_cores)
    return caps


def compute_bound(region: RegionOps | DeviceProgram, hw: HardwareSpec, hbm_names: frozenset[str]) -> bool:
    """Whether the region's compute at peak outlasts reading its HBM tensors once: then the
    planner prices the arrival of every input an earlier operator produced in the plan's
    partitions (``plan_operator(arriving=...)``). In an HBM-bound region (a decode step)
    Elk overlaps execution, re-layouts included, with the loads (Elk §4.2): the arrival is
    hidden, and pricing it would trade hidden time for loads. Even where a decode step's
    executions outlast its loads (Gemma2-27B on ``ipu-pod4-hbm``), pricing arrivals there
    halves the re-layouts but lengthens the plans' compute by more, so the step is no faster
    (measured on its first two and four layers). (The Elk pass's trade-off tables keep the
    held outputs of compute-bound regions within the planned partitions by the same test:
    :func:`~tvm_icca.model_pass.tradeoff_tables.ladder_output_caps`.) On a chip without HBM
    the state is on chip (planned by the reconciliation, which prices arrivals itself) or
    streams from the host, which bounds the region: ``False``."""
    if hw.hbm_bandwidth <= 0:
        return False
    compute_s = 0.0
    for op in region.ops:
        template = template_for(op.expr.kind)
        compute_s += template.flops(op.expr, {}) / hw.peak_flops(template.unit, compute_dtype(op.expr))
    hbm_bytes: dict[str, int] = {}
    for op in region.ops:
        for t, name in enumerate(op.input_names):
            if name in hbm_names:
                # the whole tensor (pieces of a split read blocks of it), or the rows a
                # gather reads of its table
                access = op.expr.inputs[t]
                read = (op.expr.read_bytes(t) if access.gather is not None
                        else tensor_bytes(access.tensor_shape, access.dtype))
                hbm_bytes[name] = max(hbm_bytes.get(name, 0), read)
    return compute_s > sum(hbm_bytes.values()) / hw.hbm_bandwidth


def region_budgets(region: RegionOps, hw: HardwareSpec,
                   plan_one: Callable[[PendingOp, int], int]) -> list[int]:
    """Per operator of ``region``, in order, the SRAM per core its plan may use: what the
    earlier outputs still held while it runs (:func:`held_bytes`) leave. ``plan_one(op,
    budget)`` plans an operator within its budget and returns its output's partition bytes
    per core, which the later budgets then account for."""
    budgets: list[int] = []
    held = HeldBytes([op.input_names for op in region.ops], [op.output_name for op in region.ops],
                     region.staying_outputs)
    for i, op in enumerate(region.ops):
        budget = hw.usable_sram_bytes - held.held(i)
        if budget <= 0:
            raise PlanNotFoundError(
                f"{op.describe()} ({op.expr.tensor_summary()}): the intermediates its region "
                f"holds already fill the {hw.usable_sram_bytes} usable bytes per core of chip "
                f"'{hw.name}' ({hw.num_cores} cores)"
            )
        held.add(plan_one(op, budget))
        budgets.append(budget)
    return budgets


def held_bytes(region: RegionOps, output_bytes: list[int]) -> list[int]:
    """Per operator of ``region``, the bytes per core of earlier outputs still held on chip
    while it runs, given the output partition bytes of the operators planned so far
    (:func:`runtime_sim.contract.lifetimes.held_bytes`, the device's own lifetime rule)."""
    return lifetime_held_bytes([op.input_names for op in region.ops],
                               [op.output_name for op in region.ops], region.staying_outputs, output_bytes)
