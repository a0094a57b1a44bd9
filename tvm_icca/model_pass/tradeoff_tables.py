"""Per-operator trade-off tables of a model run, the input of the Elk pass (Elk §4.3).

For every operator of the run (region calls in order, operators in program order) the pass
needs what Elk's scheduler trades off (:class:`~tvm_icca.elk.tradeoffs.OpTradeoffs`):

* **execute-state plans** (Elk §4.3, trade-off 1; Fig. 5): the operator's plans from fastest
  to smallest. The fastest is the plan the region planner chose (the fastest that fits the
  SRAM its region leaves, mapped to chips near its producers and HBM data); smaller ones are
  the fastest plans within a ladder of shrinking budgets (:data:`BUDGET_LADDER`), each
  :func:`~tvm_icca.plan_search.search.plan_operator`'s exact optimum for its budget. A full Pareto
  scan per operator (:func:`~tvm_icca.plan_search.pareto.pareto_plans`) costs about 10 s for one
  13B-sized matmul on this machine; the ladder keeps its useful corner (most of a decode
  matmul's frontier is within 2x of its smallest footprint) for a fraction of that. The
  ladders of every distinct operator are searched first, side by side on the plan cache's
  worker processes (:meth:`~tvm_icca.model_pass.plan_cache.PlanCache.prefetch_ladders`).
* **preload-state plans** (trade-offs 2 and 3): for each execute-state plan, the chunk counts
  of its off-chip inputs (:mod:`runtime_sim.contract.preload_chunks`), kept when Pareto-optimal in preload
  space vs distribution time;
* the off-chip bytes it reads and the activations other operators keep live while it runs
  (:func:`runtime_sim.contract.lifetimes.held_bytes`, the device's lifetime rule), and those
  held before it starts, beside its own preload (:func:`~runtime_sim.contract.lifetimes.held_between`).

Every execute-state point also pays the arrival of its on-chip inputs
(:func:`arrival_seconds`): the re-layout from where the producer's compiled plan leaves them
(or a region input's canonical blocks) onto the point's cores, exact box overlaps as the device
moves them (:func:`runtime_sim.contract.relayout.input_relayout`), one phase per input costed by the
device's own network model (:meth:`runtime_sim.machine.topology_base.Topology.multicast_phase`: the
busiest receive *or send* port, the inter-chip fabric, the hop latency). Its link-busy part
(:attr:`~runtime_sim.machine.phase_cost.PhaseCost.busy_s`) counts as the point's traffic too. Costing
only the busiest receiver missed hot senders: on Llama2-70B the residual add after attention
receives at most 312 B per core but one producer core sends 5,952 B (1.1 us, priced 0.06
us), and the estimate then gave the preloads beside such operators less link share than the
device does. (An earlier
version charged every operator its full input partitions as a constant, which made schedules
worse; the re-layout from the actual producer brings the estimate of a decode step within
about 25% of the simulated time, from 35-90% below it, and on 2-layer decode runs Llama2-70B
schedules 11% faster, Llama2-13B and OPT-30B 3%.)

Execution times are the plan cost model's (corrected where the device runs a plan differently,
:func:`_device_correction`); arrivals, preload deliveries and distributions are the device's own
phases on the chip's topology (:func:`runtime_sim.machine.preload_delivery.preload_delivery`,
:func:`runtime_sim.machine.preload_delivery.distribution_phase`); the timing simulator measures the resulting
program with those phases, routed, and their contention over time. Identical operators (same
structure, plan and sources) share one table.

With tuning records (:func:`tvm_icca.use_database`, issue 12 item 4) the execute-state
points of an operator that has records are built from measurements where there are some
(:func:`_with_records`): a point whose plan was measured takes its measured seconds, the
measured plans no larger than the operator's plan join as points, and the points without a
measurement take their analytic time scaled by the median measured/analytic ratio of the
operator's records (the analytic model is off by a factor per operator -- 2.2x for the
compiler's plan of the 64-core test chip's matmul -- and unscaled an unmeasured point would
look faster than the measured ones). The Pareto front of these (time vs space) is what the
Elk scheduler trades off. Records carry simulated seconds; the compiler reads them
(:func:`tvm_icca.plan_search.plan_hook.measured_plans`) and never measures. A tuning session on a chip
with HBM measures the compiler's ladder plans (:func:`ladder_budgets`) with its own plan.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.expr import dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.lifetimes import held_beside_later, held_between, held_bytes
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.preload_chunks import chip_read_bytes, chunk_options, preload_bytes
from runtime_sim.contract.program import DeviceProgram, OpProgram
from runtime_sim.contract.relayout import (
    BlockGrid,
    canonical_grid,
    input_boxes,
    input_relayout,
    producer_grid,
)
from runtime_sim.contract.stream import PRODUCED, input_sources
from runtime_sim.machine.links import (
    bandwidth_view,
    replica_reduction_busy_seconds,
    replica_reduction_seconds,
)
from runtime_sim.machine.phase_cost import relayout_pattern
from runtime_sim.machine.preload_delivery import distribution_phase, preload_delivery
from runtime_sim.machine.topology import make_topology
from runtime_sim.machine.topology_base import Topology
from tvm_icca.elk.tradeoffs import ExecPoint, OpTradeoffs, PreloadPoint
from tvm_icca.model_pass.plan_cache import LadderStep, PlanCache
from tvm_icca.model_pass.region_plans import compute_bound
from tvm_icca.plan_search.batch_cost import AnalyticBatchModel
from tvm_icca.plan_search.cost import AnalyticCostModel, PlanCost
from tvm_icca.plan_search.fit import fits
from tvm_icca.plan_search.mapping import choose_core_order, rotation_inter_chip_bytes
from tvm_icca.plan_search.plan_hook import measured_plans
from tvm_icca.plan_search.structure import build_structure
from tvm_icca.progress import Phase
from tvm_icca.records.keys import plan_signature

#: Budgets (fractions of the fastest plan's footprint) of the smaller execute-state plans.
#: The steps above 0.36 are fine because a decode product's fastest plan (by the plan cost
#: model, which leaves out the arrival of its inputs) splits the reduction axis least and so
#: receives the most activation: Llama2-70B's down projection, ``k`` split 23 ways, re-lays
#: 82 KB per core (15 us of its 34 us), while the plans at 0.8 and 0.6 of its footprint
#: receive half or less; with (0.6, 0.36, 0.22) the Elk pass never saw them (a 70B decode
#: layer 149 -> 143 us; ``benchmarks/layer_profile.py``'s ``x exec bound`` column).
BUDGET_LADDER = (0.8, 0.6, 0.45, 0.36, 0.22)
#: Only operators whose fastest plan takes at least this share of a core's SRAM get smaller
#: execute-state plans: shrinking a smaller one frees little, and searches within tight
#: budgets are the slowest (a small convolution's can take minutes).
LADDER_MIN_SHARE = 1 / 32
#: At most this many chunk counts per input (1, the replica count, and divisors between).
MAX_CHUNK_OPTIONS = 5


@dataclass(frozen=True)
class ExecChoice:
    """The handle of an execute-state point (:attr:`ExecPoint.plan`): the plan, and whether
    it came from tuning records (reports count such operators as tuned)."""

    plan: ExecutionPlan
    tuned: bool = False


def operator_tables(programs: Sequence[DeviceProgram], hw: HardwareSpec,
                    cache: PlanCache, phase: Phase | None = None) -> list[OpTradeoffs]:
    """The trade-off table of every operator of the run, in execution order; ``phase``
    counts the operators, then each one's table (:mod:`tvm_icca.progress`)."""
    has_hbm = hw.hbm_bandwidth > 0
    rows = []
    for program in programs:
        sources = input_sources(program, has_hbm)
        producer_of = {op.output_name: op for op in program.ops}
        hbm_names = frozenset(n for op, row in zip(program.ops, sources)
                              for n, s in zip(op.input_names, row) if s == "hbm")
        caps = ladder_output_caps(program, hw) if compute_bound(program, hw, hbm_names) else {}
        for j, (op, row) in enumerate(zip(program.ops, sources)):
            hbm = tuple(t for t, s in enumerate(row) if s == "hbm")
            host = tuple(t for t, s in enumerate(row) if s == "host")
            arriving = tuple((t, producer_of[op.input_names[t]].plan.to_dict() if s == PRODUCED else None)
                             for t, s in enumerate(row) if s in (PRODUCED, "chip"))
            cap = caps.get(j)
            points_key = json.dumps([op.expr.structure_key(), op.plan.to_dict(), hbm, host, arriving, cap],
                                    separators=(",", ":"))
            rows.append((op, hbm, host, arriving, producer_of, cap, points_key))
    # the points depend on the operator, its plan and its sources, not on what else is live
    # (identical layers of one region hold different region outputs around them)
    distinct: dict[str, tuple] = {}
    for row in rows:    # the first of each, as the memo below builds it
        distinct.setdefault(row[-1], row)
    cache.prefetch_ladders([ladder_steps(op, hbm, hw, cap)
                            for op, hbm, _, _, _, cap, _ in distinct.values()], hw)
    if phase is not None:
        phase.add(len(rows))
    memo: dict[str, OpTradeoffs] = {}
    tables: list[OpTradeoffs] = []
    topo = make_topology(hw)
    for op, hbm, host, arriving, producer_of, cap, points_key in rows:
        table = memo.get(points_key)
        if table is None:
            def build(op=op, hbm=hbm, host=host, producer_of=producer_of,
                      arriving=arriving, cap=cap, points_key=points_key) -> OpTradeoffs:
                grids = [(t, _source_grid(op, t, producer_of, hw)) for t, _ in arriving]
                return _table(op, hbm, host, hw, cache, points_key, grids, topo, cap)

            # tuning records in scope change the points: such a table is this compile's only
            table = memo[points_key] = (build() if measured_plans(op.expr, hw)
                                        else cache.tradeoff_table((points_key, op.tuned), hw, build))
        # the key names the points only: identical layers of one region differ in the
        # region outputs live around them (each layer's KV-cache update stays on chip),
        # and a key with those bytes would hide the repeated layers from Elk §4.4
        tables.append(dataclasses.replace(table, key=points_key))
        if phase is not None:
            phase.step()
    return _with_live_bytes(programs, _piece_keys(rows, tables), hw)


def _piece_keys(rows: Sequence[tuple], tables: list[OpTradeoffs]) -> list[OpTradeoffs]:
    """``tables`` with one key for the pieces of a split whose points are equal.

    A split operator's pieces (:mod:`tvm_icca.split`) read equal blocks at different places
    of their inputs, so their expressions, and the keys above, differ in the views
    (:meth:`~runtime_sim.contract.expr.TensorExpr.structure_key`); their points differ only
    where a block's place changes what the region planner estimated (a 32K-token prefill's
    256 query-block pieces of ``Q K^T`` have three distinct tables). Without one key for
    equal points no two pieces repeat, and Elk's local search, which moves the pieces that
    stand at one position of the nested repeats together
    (:func:`tvm_icca.elk.periods.representatives`), searched each piece alone: a search
    quadratic in the pieces. Pieces whose expressions differ only in their views and whose
    tables are equal get one key; the keys of other operators are left as they are."""
    groups: dict[str, dict[str, OpTradeoffs]] = {}
    grouped: set[str] = set()
    for (op, hbm, host, arriving, _, cap, points_key), table in zip(rows, tables):
        if points_key in grouped:   # the same points key is the same place-less one
            continue
        grouped.add(points_key)
        placeless = json.dumps([op.expr.structure_key(views=False), op.plan.to_dict(), hbm, host,
                                arriving, cap], separators=(",", ":"))
        groups.setdefault(placeless, {})[points_key] = table
    rename: dict[str, str] = {}
    for placeless, by_key in groups.items():
        if len(by_key) < 2:
            continue
        distinct: list[OpTradeoffs] = []
        for points_key, table in by_key.items():
            same = next((v for v, other in enumerate(distinct) if _same_points(other, table)), None)
            if same is None:
                same = len(distinct)
                distinct.append(table)
            rename[points_key] = json.dumps([placeless, same], separators=(",", ":"))
    if not rename:
        return tables
    return [dataclasses.replace(t, key=rename[t.key]) if t.key in rename else t for t in tables]


def _same_points(a: OpTradeoffs, b: OpTradeoffs) -> bool:
    """Whether two tables offer the same points (their keys aside)."""
    return a.execs == b.execs and a.preloads == b.preloads and a.hbm_bytes == b.hbm_bytes


def _with_live_bytes(programs: Sequence[DeviceProgram], tables: list[OpTradeoffs],
                     hw: HardwareSpec) -> list[OpTradeoffs]:
    """``tables`` (in execution order) with their ``live_bytes``: per operator, the bytes per
    core of the region's earlier outputs still held while it runs
    (:func:`runtime_sim.contract.lifetimes.held_bytes`), each output counted at the largest
    partition any of its producer's execute-state points gives it.

    The Elk pass may run a producer at any point of its table, and a point of a tighter
    budget can hold a larger output partition per core (fewer cores split the output): a
    Llama2-13B training forward whose attention scores' producer moved to such a point held
    65 KB more per core than the region planner's plan, and the simulated device found the
    next operator overflowing SRAM. Counting the largest keeps every window the Elk pass
    checks an upper bound of what the device holds.

    Their ``waiting_bytes`` likewise: what the device holds from the end of the operator
    before to this one's start (:func:`runtime_sim.contract.lifetimes.held_between`; the first
    operator of a region call waits beside what the call before keeps to its end)."""
    largest: dict[str, int] = {}    # by table key: the operator's largest output partition
    out, flat = [], 0
    kept = 0    # what the previous region call keeps to its end
    for program in programs:
        out_bytes = []
        for op in program.ops:
            table = tables[flat + len(out_bytes)]
            size = largest.get(table.key)
            if size is None:
                t = len(op.expr.tensors) - 1
                plans = [op.plan] + [p.plan.plan for p in table.execs]
                size = largest[table.key] = max(
                    OpLayout(op.expr, plan, hw.cores_per_chip).partition_bytes(t) for plan in plans)
            out_bytes.append(size)
        lifetimes = ([op.input_names for op in program.ops], [op.output_name for op in program.ops],
                     program.staying_outputs, out_bytes)
        held = held_bytes(*lifetimes)
        between = held_between(*lifetimes)
        between[0] = kept
        out += [dataclasses.replace(tables[flat + k], live_bytes=int(h), waiting_bytes=int(w))
                for k, (h, w) in enumerate(zip(held, between))]
        kept = between[-1]
        flat += len(program.ops)
    return out


def _source_grid(op: OpProgram, t: int, producer_of: dict[str, OpProgram], hw: HardwareSpec) -> BlockGrid:
    """Where on-chip input ``t`` of ``op`` is before it runs: its producer's output blocks, or
    a region input's canonical blocks (as the device holds them)."""
    producer = producer_of.get(op.input_names[t])
    if producer is not None:
        return producer_grid(OpLayout(producer.expr, producer.plan, hw.cores_per_chip))
    access = op.expr.inputs[t]
    return canonical_grid(tuple(access.shape), dtype_bytes(access.dtype), hw.num_cores)


def arrival_seconds(layout: OpLayout, grids: Sequence[tuple[int, BlockGrid]],
                    topo: Topology) -> tuple[float, float]:
    """``(time, link-busy time)`` of bringing on-chip inputs from where they are (``grids``:
    input index, its blocks) onto ``layout``'s cores: one re-layout phase per input, one
    after another, each costed as the device costs it (:meth:`Topology.multicast_phase` of
    the exact box overlaps, the same pattern the timing simulator builds)."""
    time_s = busy_s = 0.0
    for t, grid in grids:
        rl = input_relayout(grid, layout, t, topo.node_chip, topo.num_chips)
        phase = topo.multicast_phase(relayout_pattern(rl))
        time_s += phase.time_s
        busy_s += phase.busy_s
    return time_s, busy_s


def _table(op: OpProgram, hbm: tuple[int, ...], host: tuple[int, ...],
           hw: HardwareSpec, cache: PlanCache, key: str,
           grids: Sequence[tuple[int, BlockGrid]], topo: Topology, cap: int | None) -> OpTradeoffs:
    offchip = tuple(sorted(hbm + host))
    execs: list[ExecPoint] = []
    preloads: list[tuple[PreloadPoint, ...]] = []
    points = [(plan, time_s, traffic_s, op.tuned and k == 0)
              for k, (plan, time_s, traffic_s) in enumerate(_exec_ladder(op, hbm, hw, cache, cap))]
    measured = measured_plans(op.expr, hw)
    if measured:
        points = _with_records(op, hbm, hw, points, measured)
    candidates = []
    for plan, time_s, traffic_s, tuned in points:
        layout = OpLayout(op.expr, plan, hw.cores_per_chip)
        arrival_s, arrival_busy_s = arrival_seconds(layout, grids, topo)
        candidates.append((time_s + arrival_s, layout.memory_bytes_per_core(), traffic_s + arrival_busy_s,
                           layout, ExecChoice(plan, tuned)))
    # the frontier: fastest first, each point smaller than every faster one (the arrival can
    # make a smaller plan the faster one)
    for time_s, space, traffic_s, layout, choice in sorted(candidates, key=lambda c: (c[0], c[1])):
        if execs and space >= execs[-1].space:
            continue
        execs.append(ExecPoint(time_s, space, min(traffic_s, time_s), choice))
        if offchip:
            preloads.append(_preload_points(layout, offchip, hbm, host, hw, topo))
    offchip_bytes = float(sum(op.expr.read_bytes(t) for t in offchip))
    # what the region holds around it depends on the other operators' points (_with_live_bytes)
    return OpTradeoffs(key=key, execs=tuple(execs), preloads=tuple(preloads),
                       hbm_bytes=offchip_bytes, live_bytes=0)


def _exec_ladder(op: OpProgram, hbm: tuple[int, ...], hw: HardwareSpec,
                 cache: PlanCache, cap: int | None) -> list[tuple[ExecutionPlan, float, float]]:
    """(plan, time, traffic time) from the fastest (the region planner's plan) down the
    budget ladder; ``cap``: the most bytes per core a point's output partition may take
    (:func:`ladder_output_caps`)."""
    first = OpLayout(op.expr, op.plan, hw.cores_per_chip)
    cost = AnalyticCostModel()(first, hw)  # what the region planner estimated for it
    extra, traffic = _device_correction(first, cost, hw)
    points = [(op.plan, (op.estimated_time_s or cost.time_s) + extra, traffic)]
    for expr, budget, name, hbm_inputs, output_cap in ladder_steps(op, hbm, hw, cap):
        try:
            planned = cache.plan(expr, hw, None, budget, name, hbm_inputs, output_cap=output_cap)
        except PlanNotFoundError:
            break
        extra, traffic = _device_correction(OpLayout(op.expr, planned.plan, hw.cores_per_chip),
                                           planned.cost, hw)
        points.append((planned.plan, planned.time_s + extra, traffic))
    return points


def _device_time(layout: OpLayout, cost: PlanCost, hw: HardwareSpec) -> tuple[float, float]:
    """(time, link time) of a plan as the ladder counts them: ``cost`` with the replica
    reduction the device runs and its rotations' inter-chip fabric (:func:`_device_correction`)."""
    extra, traffic = _device_correction(layout, cost, hw)
    return cost.time_s + extra, traffic


def _device_correction(layout: OpLayout, cost: PlanCost, hw: HardwareSpec) -> tuple[float, float]:
    """(seconds to add to ``cost``'s time, link time) of a plan whose replica reduction runs
    as the device schedules it, and whose rotations cross chips where its placement puts them.

    The plan search prices the reduction with T10's ``(R - 1) / R`` ring term
    (:data:`~tvm_icca.plan_search.batch_cost.REDUCTION_TERMS` says why), but the device sums the
    replicas by a gather tree or a chunk chain (:func:`runtime_sim.machine.links.
    replica_reduction_seconds`), whose rounds each pay a latency, the adds and a
    synchronization: for a decode step's k-split weight matmuls (36 replicas of a small
    partition) that is ~10x the ring term, about half of the layer's matmul time. Elk §4.3
    needs each execute-state point's real time (its cost model is fitted to the device,
    Fig. 12), or every window looks shorter than the preloads beside it and the schedule
    estimate sits on the HBM floor, where no candidate can be told from another.
    The link time is how long the plan's transfers hold link bandwidth, as the device counts
    it for the preload beside it (:attr:`runtime_sim.machine.phase_cost.PhaseCost.busy_s`): shifts and
    split combines costed on :func:`~runtime_sim.machine.links.bandwidth_view` (no hop latency, no
    synchronization) and the replica reduction's received partitions
    (:func:`~runtime_sim.machine.links.replica_reduction_busy_seconds`).

    The plan search is chip-unaware (:mod:`tvm_icca.plan_search.mapping` only places its result),
    but a shift phase lasts as long as the busier of its ports and the inter-chip fabric
    (:attr:`runtime_sim.machine.phase_cost.PhaseCost.busy_s`): where the rotations' bytes crossing
    chips (:func:`~tvm_icca.plan_search.mapping.rotation_inter_chip_bytes`) take the fabric longer
    than the ports take the shifts, the excess is added to both. A Llama2-13B ``o_proj`` point
    at batch 16 rotating its input 4 times over 5,832 cores sends 296 of every phase's
    partitions to another chip: 0.95 us per phase on the fabric against 0.37 us at the
    ports."""
    structure = build_structure(layout.expr)
    terms = AnalyticBatchModel(hw, reduction="schedule").layout_terms(layout, structure)
    out = len(layout.expr.tensors) - 1
    replicas = layout.replicas(out)
    pbytes = layout.replica_bytes()  # an attention replica sends its running max and sum too
    elements = pbytes / dtype_bytes(layout.expr.output.dtype)
    free = bandwidth_view(hw)
    free_terms = AnalyticBatchModel(free, reduction="schedule").layout_terms(layout, structure)
    # the free reduction term is the replica reduction plus the split combine: keep the combine
    combine = free_terms["reduction_s"] - replica_reduction_seconds(replicas, pbytes, elements, free)
    cross = rotation_inter_chip_bytes(layout, hw.cores_per_chip) if hw.num_chips > 1 else 0.0
    fabric_s = cross / hw.inter_chip_bandwidth if cross and hw.inter_chip_bandwidth > 0 else 0.0
    excess = max(0.0, fabric_s - free_terms["shift_s"])
    busy = (free_terms["shift_s"] + excess + combine
            + replica_reduction_busy_seconds(replicas, pbytes, elements, hw))
    return terms["reduction_s"] - cost.reduction_s + excess, float(busy)


def ladder_steps(op: OpProgram, hbm: tuple[int, ...], hw: HardwareSpec,
                 cap: int | None = None) -> list[LadderStep]:
    """The plan searches of ``op``'s smaller execute-state points, largest budget first, each
    with an output partition of at most ``cap`` bytes per core (``None``: any)."""
    fastest = OpLayout(op.expr, op.plan, hw.cores_per_chip).memory_bytes_per_core()
    return [(op.expr, budget, op.name, hbm, cap) for budget in ladder_budgets(fastest, hw)]


def ladder_output_caps(program: DeviceProgram, hw: HardwareSpec) -> dict[int, int]:
    """Operator index -> the most bytes per core the output partition of its smaller
    execute-state points may take: the partition of the region planner's plan, for an
    output the region holds while later operators run
    (:func:`runtime_sim.contract.lifetimes.held_beside_later`). :func:`operator_tables` caps
    the points of compute-bound regions only (:func:`~tvm_icca.model_pass.region_plans.compute_bound`):
    there the planned plans are what the region's time is made of, while in an HBM-bound
    region (a decode step) the Elk pass trades execution space for preloads, and a point that
    holds its output on fewer cores is one more such trade (on the decode table of
    ``benchmarks/elk_llm.py`` capping every region moved Elk-Full by -2.3% to +0.6%).

    The region planner gave those later operators the SRAM that partition leaves; a point
    writing the output onto fewer cores would take more of every core the output outlives, and
    the live bytes the Elk pass reserves count each output at its largest point
    (:func:`_with_live_bytes`). Uncapped, a 32K-token Llama2-13B prefill's gate projection had
    a point holding its ``[32768, 13824]`` output 47 KB per core larger, so the up projection
    beside it lost its planned plan (5.8 ms) to one of 420 rotation steps (11.0 ms)."""
    held = held_beside_later([op.input_names for op in program.ops],
                             [op.output_name for op in program.ops], program.staying_outputs)
    return {j: OpLayout(program.ops[j].expr, program.ops[j].plan, hw.cores_per_chip)
            .partition_bytes(len(program.ops[j].expr.tensors) - 1) for j in held}


def ladder_budgets(fastest_bytes: int, hw: HardwareSpec) -> list[int]:
    """The budgets of the smaller execute-state plans of an operator whose fastest plan takes
    ``fastest_bytes`` per core (:data:`BUDGET_LADDER`; none below :data:`LADDER_MIN_SHARE`:
    too small to be worth shrinking, and tight budgets search longest). A tuning session on a
    chip with HBM measures these plans too (:mod:`tvm_icca.tuning.session`)."""
    if fastest_bytes < hw.usable_sram_bytes * LADDER_MIN_SHARE:
        return []
    return [int(fastest_bytes * fraction) for fraction in BUDGET_LADDER]


def _with_records(op: OpProgram, hbm: tuple[int, ...], hw: HardwareSpec,
                  ladder: list[tuple[ExecutionPlan, float, float, bool]],
                  measured: Sequence[tuple[float, ExecutionPlan]]
                  ) -> list[tuple[ExecutionPlan, float, float, bool]]:
    """The execute-state points from measurements where there are some (module docstring):
    fastest first, each smaller and slower than the one before."""
    seconds = {plan_signature(plan): s for s, plan in measured}
    cost_model = AnalyticCostModel()
    layouts = [OpLayout(op.expr, plan, hw.cores_per_chip) for _, plan in measured]
    # the ladder's times pay the device's replica reduction: the reference they are scaled
    # by must too, or the reduction's correction is applied twice
    analytic = [_device_time(layout, cost_model(layout, hw), hw)[0] for layout in layouts]
    ratios = [m / a for (m, _), a in zip(measured, analytic) if a > 0]
    ratio = float(np.median(ratios)) if ratios else 1.0
    points = []
    for plan, time_s, traffic_s, tuned in ladder:
        m = seconds.get(plan_signature(plan))
        scale = m / time_s if m is not None and time_s > 0 else ratio
        points.append((plan, m if m is not None else time_s * ratio, traffic_s * scale, tuned))
    first_space = OpLayout(op.expr, op.plan, hw.cores_per_chip).memory_bytes_per_core()
    known = {plan_signature(p) for p, *_ in ladder}
    smallest = None  # a measured plan joins only if smaller than every faster measured one
    for (m, plan), layout in zip(measured, layouts):  # fastest first
        if plan_signature(plan) in known or fits(op.expr, plan, hw, first_space) is not None:
            continue
        space = layout.memory_bytes_per_core()
        if smallest is not None and space >= smallest:
            continue
        smallest = space
        mapped = choose_core_order(op.expr, plan, hw, hbm)
        mapped_layout = OpLayout(op.expr, mapped, hw.cores_per_chip)
        time_s, traffic_s = _device_time(mapped_layout, cost_model(mapped_layout, hw), hw)
        share = traffic_s / time_s if time_s > 0 else 0.0
        points.append((mapped, m, m * share, True))
    # the Pareto front: fastest first, then each point smaller than all faster ones
    spaces = [OpLayout(op.expr, p[0], hw.cores_per_chip).memory_bytes_per_core() for p in points]
    front, last = [], None
    for k in sorted(range(len(points)), key=lambda k: (points[k][1], spaces[k])):
        if last is None or spaces[k] < last:
            front.append(points[k])
            last = spaces[k]
    return front


def _preload_points(layout: OpLayout, offchip: tuple[int, ...], hbm: tuple[int, ...],
                    host: tuple[int, ...], hw: HardwareSpec, topo: Topology) -> tuple[PreloadPoint, ...]:
    """Pareto-optimal chunk choices (preload space vs distribution and load time), MaxPreload
    first, each priced as the device runs it.

    Per input, every chunk count (:func:`_chunk_choices`) is costed alone: its preload space,
    its distribution phase (:func:`runtime_sim.machine.preload_delivery.distribution_phase`) and the seconds its
    busiest source needs; the combinations over inputs are pruned to the Pareto set of those
    sums. Each kept combination is then priced whole: the delivery of its inputs from each
    source (:func:`runtime_sim.machine.preload_delivery.preload_delivery`: controllers, edge ports or host
    links, multicast on the topology; HBM and host legs run side by side, as the device runs
    them) and one distribution phase of all its chunked inputs. Pricing the delivery as
    preload bytes over one core's link bandwidth made a mesh's preloads look about three times
    faster than its edge ports deliver them (Llama2-13B, 2 layers, 8 TB/s: estimated 0.61 ms,
    simulated 1.95 ms), and the Elk designs then preloaded more than the mesh can carry."""
    chip_of = topo.node_chip[layout.physical]
    boxes = {t: input_boxes(layout, t) for t in offchip}
    phases: dict[tuple[tuple[int, int], ...], float] = {}

    def distribute_s(chunked: tuple[tuple[int, int], ...]) -> float:
        # an operator with one chunked input (most) costs the same phase twice otherwise
        chunked = tuple((t, s) for t, s in chunked if s > 1)
        if chunked not in phases:
            phases[chunked] = distribution_phase(topo, layout, chunked)[0].time_s
        return phases[chunked]

    # per input and chunk count: (space, distribution seconds, seconds its source needs)
    combos: list[tuple[int, float, float, tuple[tuple[int, int], ...]]] = [(0, 0.0, 0.0, ())]
    for t in offchip:
        # a chip's HBM (its share of the controllers) or its host link sends its bytes
        rate = (hw.hbm_bandwidth / hw.num_chips) if t in hbm else hw.host_bandwidth
        options = []
        for s in _chunk_choices(layout, t):
            source_s = float(chip_read_bytes(layout, t, s, chip_of, hw.num_chips, boxes[t]).max()) / rate
            options.append((preload_bytes(layout, t, s), distribute_s(((t, s),)), source_s, s))
        combos = _pareto([(a + sp, d + dd, src + ss, c + (((t, s),) if s > 1 else ()))
                          for a, d, src, c in combos for sp, dd, ss, s in options])
    priced = []
    for space, _, _, chunks in combos:
        chunks_of = dict(chunks)
        legs = [preload_delivery(topo, kind, layout, inputs, tuple(chunks_of.get(t, 1) for t in inputs),
                                 [boxes[t] for t in inputs])
                for kind, inputs in (("hbm", hbm), ("host", host)) if inputs]
        point = PreloadPoint(space=int(space), distribute_s=float(distribute_s(chunks)),
                             load_s=float(max(leg.duration_s for leg in legs)),
                             network_s=float(max(leg.network.time_s for leg in legs)), chunks=chunks)
        priced.append((point.space, point.distribute_s, point.load_s, point))
    return tuple(p[-1] for p in _pareto(priced))


def _chunk_choices(layout: OpLayout, t: int) -> list[int]:
    options = chunk_options(layout, t)
    if len(options) <= MAX_CHUNK_OPTIONS:
        return options
    # keep both ends and a geometric spread between them
    picks = {options[0], options[-1]}
    step = (len(options) - 1) / (MAX_CHUNK_OPTIONS - 1)
    picks.update(options[round(k * step)] for k in range(1, MAX_CHUNK_OPTIONS - 1))
    return sorted(picks)


def _pareto(points: list[tuple]) -> list[tuple]:
    """Largest space first; a point stays if it needs less space than every point before it
    and is slower to distribute or to load (Elk §4.3 keeps the Pareto set)."""
    points = sorted(points, key=lambda p: (-p[0], p[1], p[2]))
    front: list[tuple] = []
    for p in points:
        while front and p[1] <= front[-1][1] and p[2] <= front[-1][2]:
            front.pop()  # p needs less space and costs no more time
        front.append(p)
    return front
