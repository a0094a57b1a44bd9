"""Event-driven timing of device programs: operators, transfers and HBM loads on a timeline.

Elk §5 ("Simulation framework") describes an event-driven ICCA simulator with per-core
compute, per-link transfers and HBM fetches. This one is event-driven at operator and
transfer granularity: each operator's homogeneous steps are costed in closed form
(:mod:`.opcost`), each transfer phase on the topology (:mod:`runtime_sim.machine.topology`), and a
small event queue (``heapq``) orders operator executions on the compute array and loads on
the HBM controllers and host links.

Data sources of an operator input (``TensorDecl.source``, program format):

* produced earlier in the region -> re-laid out from the producer's ring-0 cores over the
  interconnect (exact box overlaps, :mod:`.geometry`);
* ``"chip"`` region input -> re-laid out from a canonical block layout over all cores
  (estimate: the producing region's layout is not known to this program);
* ``"resident"`` region input (model state kept on chip, T10 §4.3.2) -> it waits in the
  placement of its reader's :attr:`~runtime_sim.contract.program.OpProgram.idle_plan` (or spread in
  near-even blocks over all cores, :data:`~runtime_sim.contract.program.IDLE_SPREAD`); the setup phase
  re-lays it out into the active plan (exact box overlaps), or moves nothing when the
  operator idles in its active plan (``idle_plan is None``). Its idle placement occupies SRAM
  for the whole run, on top of everything below;
* ``"hbm"`` -> loaded from HBM: unique bytes per chip at ``hbm_bandwidth / hbm_controllers``
  per controller, striped over the chip's controllers (Elk §5), delivered to every core that
  needs them over the network; the load lasts ``max(controller time, network time)``. A
  tensor two chips need is read from HBM twice (each chip reads its own copy): the report's
  ``hbm_delivered_bytes`` counts such copies, ``hbm_bytes`` the distinct bytes of the distinct
  HBM tensors read per run (per region call and tensor name, the most any operator reads);
* ``"host"`` -> over the chip's host link at ``hw.host_bandwidth`` (8 GB/s, T10 Table 3);
  the other leg of such a round trip, a region output the host reads
  (:attr:`~runtime_sim.contract.program.DeviceProgram.host_outputs`), goes back chip -> host over the
  same links when its producer ends: each chip's bytes of it at ``host_bandwidth``, gathered
  from the cores that hold it (the delivery's network cost, mirrored). Host links serve their
  transfers in order, so a later host input (which may depend on it) starts after it, and an
  operator reading host inputs is not prefetched while such a return is pending;
* a constant -> its entry's ``"source"`` if given, else ``"hbm"`` on a chip with HBM and
  otherwise resident: weights stay on chip in the operator's placement (T10 §4.3.2 keeps the
  model on chip and moves only inputs and outputs; the idle-to-active setup is not modelled).

Prefetch policy (runs without a preload stream, the pre-Elk behaviour): loads of operator
``i+1`` start when operator ``i`` starts executing if the SRAM it leaves free on every core
holds them, else when it ends; loads are served in operator order. While a load overlaps an
execution, its network delivery only gets the link time the execution leaves free (the
running operator keeps priority); the delay is counted as stall when it postpones the next
operator. Operators execute in program order, each once its loads are done and the previous
one ended.

Preload stream (runs whose programs carry a
:class:`~runtime_sim.contract.program.PreloadSchedule`, Elk §2.2/§4.5): the run's instructions
(:func:`runtime_sim.contract.stream.run_stream`, which refuses an invalid stream with
:class:`DeviceProgramError`) replace the prefetch policy:

* ``preload(i)`` delivers operator ``i``'s off-chip inputs (HBM and host,
  :func:`~runtime_sim.contract.stream.offchip_inputs`) in their preload state, input ``t`` cut into
  ``s = op.chunks_of(t)`` chunks (:mod:`runtime_sim.contract.preload_chunks`): each chip reads the distinct
  bytes of the chunks its cores hold once (HBM controllers as for a load above; host inputs
  over the host links), and the network multicasts each chunk to its delivery group
  (:func:`~runtime_sim.contract.preload_chunks.delivery_groups`), every core receiving
  :func:`~runtime_sim.contract.preload_chunks.delivered_bytes`. Alone it lasts ``max(source time, network
  time)``. Preloads run one after another in issue order (one queue); a preload starts once
  the previous one is done and the ``execute`` issued before it in the stream has ended
  (``execute(i)`` blocks every later instruction until it ends).
* ``execute(i)`` starts when the previous execute ended and ``preload(i)`` is done (an
  operator the stream does not preload waits for the previous execute only). It lasts the
  distribution phase -- every flow of :func:`~runtime_sim.contract.preload_chunks.distribution` of its
  chunked inputs, costed together as one phase on the topology, a core's chunk multicast
  to its block -- plus the re-layout of its on-chip inputs and its steps, as above.
* Interconnect contention: while an execute runs, the preload in progress gets only the
  link share it leaves (``1 - link_busy_s / duration_s`` of the running operator: its
  transfer phases' bytes over bandwidth, hop latencies excluded), at full rate otherwise;
  the network progress is integrated between execute starts and ends. A preload's delay
  beyond its uncontended duration is ``OpTiming.preload_stall_s``; the wait it causes on
  the compute array (each execute's start against a replay of the stream with uncontended
  preloads; an execute's share is the growth of that lag since the previous execute, at
  most its wait) is ``interconnect_stall_s`` and counts in ``stall_s``.
* SRAM, checked on the timeline at every preload start and execute start, per physical
  core: the execution space (while an operator executes, its device accounting below: its
  partitions, live activations, shift buffer and resident idle state; between executes, the
  live activations and resident state the last one left, plus the shift buffer) plus the
  preload space (:func:`~runtime_sim.contract.preload_chunks.preload_bytes` of each preloaded input, on the
  operator's cores) of every operator whose preload has started and whose execute has not;
  an operator's own preload space becomes part of its execution space when it starts.
  Overflow raises :class:`SramOverflowError` naming the operator being preloaded or
  executed at that instant. The report's peak SRAM is the peak of this timeline.
* The ``"ideal"`` design (Elk §6.1 roofline): preloads have their own interconnect (no
  contention), distribution takes no time (its bytes still count), and the preload space
  and the execution space are each checked against the whole SRAM.

The host link serves a preload's host leg for its source time (the next transfer on it
starts after that leg's delivery ends); returns to the host are queued on it as above.

SRAM: per core, partitions of the running operator plus on-chip intermediates still needed
plus the shift buffer, exactly as :class:`runtime_sim.functional.device.SimulatedDevice` counts it, plus
the idle placements of every ``"resident"`` input of the run (which the functional device,
handed all inputs as arguments, does not hold); a program that would overflow raises
:class:`SramOverflowError` as the device does.

Stall: a transfer phase's time beyond what its slowest flow would take alone on the network
(contention on ports, links, the inter-chip cap; distribution included), plus load delays
from sharing links that postponed an operator. Region outputs stay on chip (the next region reads them as ``"chip"``
inputs) unless the host reads them (see ``"host"`` above); the run ends when the last
operator and the last return to the host have ended.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import time as _time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError, SramOverflowError, short_name
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import (
    OpLayout,
    check_op_inputs,
    checked_layout,
    input_relayout,
    rests_spread,
)
from runtime_sim.contract.lifetimes import last_reads, outlives, released
from runtime_sim.contract.preload_chunks import distribution_phase, preload_delivery
from runtime_sim.contract.program import IDLE_SPREAD, PRELOAD, DeviceProgram, OpProgram, dtype_bytes
from runtime_sim.contract.stream import PRODUCED, Instruction, input_sources, run_stream
from runtime_sim.machine.stream_timing import preload_link_share
from runtime_sim.machine.topology import (
    NO_PHASE,
    PhaseCost,
    Topology,
    make_topology,
    relayout_pattern,
)
from runtime_sim.timing.geometry import (
    Boxes,
    BlockGrid,
    canonical_grid,
    input_boxes,
    placement_grid,
    producer_grid,
)
from runtime_sim.timing.opcost import OpCost, op_cost
from runtime_sim.timing.report import SLOW_FACTOR, OpTiming, TimingReport

#: Source of a constant kept on chip in its operator's placement: it moves nowhere (T10 §4.3.2).
RESIDENT = "resident"
#: The roofline design of a preload stream (Elk §6.1): preloads on their own interconnect and
#: in their own SRAM, distribution in no time.
IDEAL = "ideal"


@dataclass
class _Load:
    """One operator's loads from one off-chip source (all its inputs from it together)."""

    kind: str  # "hbm" or "host"
    source_s: float  # controllers / host links: unique bytes over their bandwidth
    network: PhaseCost  # delivery to every core that needs the data
    unique_bytes: float  # per chip, summed over chips: what the sources send (copies per chip)
    delivered_bytes: float  # summed over receiving cores
    #: per input of the load (in order), its distinct bytes over the whole system
    distinct_bytes: tuple[float, ...] = ()

    @property
    def duration_s(self) -> float:
        return max(self.source_s, self.network.time_s)


@dataclass
class _Work:
    """One operator instance: its cost and what it needs before it can run."""

    op: OpProgram
    region: str
    program: int  # index of its program in the simulated sequence
    cost: OpCost
    relayout: PhaseCost
    relayout_bytes: float
    relayout_estimated: bool
    loads: list[_Load]
    used: np.ndarray  # SRAM per core while it runs (device accounting), shift buffer included
    prefetch_need: np.ndarray  # bytes per core its loads deposit (its loaded partitions)
    stores: list[_Load] = field(default_factory=list)  # its outputs the host reads (chip -> host)
    hbm_tensors: dict[str, float] = field(default_factory=dict)  # HBM input -> distinct bytes
    chips: tuple[int, ...] = ()  # the chips its cores are on (OpLayout.physical)
    # -- preload stream runs only (Elk §4.5) --
    #: the distribution phase of its chunked inputs (preload state -> execute state)
    distribute: PhaseCost = NO_PHASE
    distributed_bytes: float = 0.0
    #: per physical core, the preload space of its off-chip inputs (zero: nothing preloaded)
    preload_space: np.ndarray | None = None
    preloaded_bytes: float = 0.0  # sum of delivered_bytes over its preloaded inputs
    #: per physical core, SRAM held once it ended and before the next operator starts (live
    #: activations, resident idle state, shift buffer)
    resting: np.ndarray | None = None

    @property
    def duration_s(self) -> float:
        return self.distribute.time_s + self.relayout.time_s + self.cost.exec_s

    @property
    def transfer_s(self) -> float:
        return (self.distribute.time_s + self.relayout.time_s + self.cost.shift.time_s
                + self.cost.reduction.time_s)

    @property
    def link_busy_s(self) -> float:
        """How long its own traffic holds its links' bandwidth (:attr:`PhaseCost.busy_s` of
        each transfer phase): what a preload streaming meanwhile cannot use."""
        return (self.distribute.busy_s + self.relayout.busy_s + self.cost.shift.busy_s
                + self.cost.reduction.busy_s)


@dataclass
class _Caches:
    layouts: dict[str, OpLayout] = field(default_factory=dict)
    costs: dict[str, OpCost] = field(default_factory=dict)
    relayouts: dict[tuple, tuple[PhaseCost, float, bool]] = field(default_factory=dict)
    loads: dict[tuple, tuple[_Load, np.ndarray]] = field(default_factory=dict)
    boxes: dict[tuple[str, int], Boxes] = field(default_factory=dict)
    grids: dict[str, BlockGrid] = field(default_factory=dict)


def _op_key(op: OpProgram) -> str:
    """What an operator's timing depends on: its expression and plan, not its tensors' names
    (the same layer repeated in a model costs once)."""
    return json.dumps([op.expr.structure_key(), op.plan.to_dict()], sort_keys=True, separators=(",", ":"))


class _Planner:
    """Turns programs into :class:`_Work` items, costing each distinct thing once."""

    def __init__(self, hw: HardwareSpec, topo: Topology):
        self.hw = hw
        self.topo = topo
        self.c = _Caches()

    def layout(self, key: str, op: OpProgram) -> OpLayout:
        layout = self.c.layouts.get(key)
        if layout is None:
            layout = self.c.layouts[key] = checked_layout(op, self.hw)
        return layout

    def cost(self, key: str, layout: OpLayout) -> OpCost:
        cost = self.c.costs.get(key)
        if cost is None:
            cost = self.c.costs[key] = op_cost(layout, self.hw, self.topo)
        return cost

    def boxes(self, key: str, layout: OpLayout, t: int) -> Boxes:
        box = self.c.boxes.get((key, t))
        if box is None:
            box = self.c.boxes[(key, t)] = input_boxes(layout, t)
        return box

    def relayout(self, source: tuple, grid: BlockGrid, key: str, layout: OpLayout, t: int) -> tuple[PhaseCost, float, bool]:
        cache_key = (source, key, t)
        hit = self.c.relayouts.get(cache_key)
        if hit is None:
            topo = self.topo
            boxes = self.boxes(key, layout, t).placed(layout.physical, layout.span)
            # a gathered input's rows are data: the uniform-ids estimate (gather_relayout)
            rl = input_relayout(grid, layout, t, topo.node_chip, topo.num_chips, boxes=boxes)
            sampled = [rl.box_weight > 1]

            def mark_sampled() -> None:
                sampled[0] = True

            phase = topo.multicast_phase(relayout_pattern(rl, mark_sampled))
            hit = self.c.relayouts[cache_key] = (phase, rl.moved_bytes, sampled[0])
        return hit

    def load(self, kind: str, key: str, layout: OpLayout, inputs: tuple[int, ...]) -> tuple[_Load, np.ndarray]:
        cache_key = (kind, key, inputs)
        hit = self.c.loads.get(cache_key)
        if hit is not None:
            return hit
        hw, topo = self.hw, self.topo
        n = layout.num_cores
        cores = layout.physical  # numbered core -> physical core
        chip_of = topo.node_chip[cores]
        per_core = np.zeros(n)
        unique = np.zeros(hw.num_chips)
        need = np.zeros(n, np.int64)
        one_chip = np.zeros(topo.num_nodes, np.int64)
        distinct = []
        flows = []
        for t in inputs:
            box = self.boxes(key, layout, t)
            per_core += box.nbytes
            unique += box.unique_bytes_per_chip(chip_of, hw.num_chips)
            distinct.append(float(box.unique_bytes_per_chip(one_chip, 1).sum()))
            need += layout.partition_bytes(t)
            # cores with equal boxes (replicas) need the same bytes: one multicast each
            rows = np.concatenate([box.lo, box.hi], axis=1)
            group = (np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1) if rows.shape[1]
                     else np.zeros(n, np.int64))
            flows.append(topo.io_flows(kind, cores, box.nbytes, group * len(inputs) + len(flows)))
        src, dst, nbytes, group = (np.concatenate(parts) for parts in zip(*flows))
        network, source_s = topo.io_load(kind, src, dst, nbytes, group, unique)
        hit = (_Load(kind, source_s, network, float(unique.sum()), float(per_core.sum()),
                     tuple(distinct)), need)
        self.c.loads[cache_key] = hit
        return hit

    def preload(self, kind: str, key: str, layout: OpLayout, inputs: tuple[int, ...],
                chunks: tuple[int, ...]) -> tuple[_Load, np.ndarray]:
        """One operator's preload from one off-chip source in its preload state (Elk §4.3,
        :func:`runtime_sim.contract.preload_chunks.preload_delivery`): input ``inputs[i]`` cut into
        ``chunks[i]`` chunks. Returns the load and the preload space per numbered core."""
        cache_key = ("preload", kind, key, inputs, chunks)
        hit = self.c.loads.get(cache_key)
        if hit is not None:
            return hit
        d = preload_delivery(self.topo, kind, layout, inputs, chunks,
                             [self.boxes(key, layout, t) for t in inputs])
        hit = (_Load(kind, d.source_s, d.network, d.unique_bytes, d.delivered_bytes,
                     d.distinct_bytes), d.space)
        self.c.loads[cache_key] = hit
        return hit

    def distribute(self, key: str, layout: OpLayout, chunked: tuple[tuple[int, int], ...]) -> tuple[PhaseCost, float]:
        """The distribution phase of an operator's chunked inputs
        (:func:`runtime_sim.contract.preload_chunks.distribution_phase`) and its bytes."""
        cache_key = ("distribute", key, chunked)
        hit = self.c.relayouts.get(cache_key)
        if hit is None:
            phase, total = distribution_phase(self.topo, layout, chunked)
            hit = self.c.relayouts[cache_key] = (phase, total, False)
        return hit[0], hit[1]

    def store(self, key: str, layout: OpLayout) -> _Load:
        """The chip -> host return of an operator's output: the cores holding it (ring 0) send
        their partitions over their chip's host link (``host_bandwidth`` per chip); the network
        leg is costed as the mirrored delivery (cores -> host node)."""
        cache_key = ("host_out", key)
        hit = self.c.loads.get(cache_key)
        if hit is not None:
            return hit[0]
        hw, topo = self.hw, self.topo
        out = len(layout.expr.tensors) - 1
        owners = layout.physical[np.asarray(layout.owners(), np.int64)]
        per_core = np.full(owners.size, float(layout.partition_bytes(out)))
        per_chip = np.bincount(topo.node_chip[owners], weights=per_core, minlength=hw.num_chips)
        src, dst, nbytes = topo.io_flows("host", owners, per_core)
        network = topo.phase(src, dst, nbytes)
        total = float(per_core.sum())
        load = _Load("host_out", float(per_chip.max()) / hw.host_bandwidth, network, total, total)
        self.c.loads[cache_key] = (load, np.zeros(0))
        return load

    def idle_layout(self, op: OpProgram) -> tuple[str, OpLayout] | None:
        """Key and layout of the plan that ``op``'s resident inputs rest in between runs:
        its own plan when ``idle_plan`` is ``None``; ``None`` for :data:`IDLE_SPREAD`."""
        if op.idle_plan == IDLE_SPREAD:
            return None
        idle_op = op if op.idle_plan is None else dataclasses.replace(op, plan=op.idle_plan, idle_plan=None)
        idle_key = _op_key(idle_op)
        return idle_key, self.layout(idle_key, idle_op)

    def idle_grid(self, op: OpProgram, t: int) -> tuple[str, BlockGrid]:
        """Where resident input ``t`` of ``op`` idles, as blocks on cores (the source of its
        setup re-layout)."""
        idle = self.idle_layout(op)
        access = op.expr.inputs[t]
        grid_key = f"{idle[0]}#{t}" if idle is not None else f"spread#{access.shape}#{access.dtype}"
        grid = self.c.grids.get(grid_key)
        if grid is None:
            grid = placement_grid(idle[1], t) if idle is not None else None
            if grid is None:  # spread, or not block-aligned: near-even blocks over all cores
                grid = canonical_grid(tuple(access.shape), dtype_bytes(access.dtype), self.hw.num_cores)
            self.c.grids[grid_key] = grid
        return grid_key, grid

    def idle_bytes(self, op: OpProgram, t: int) -> np.ndarray:
        """Bytes per core resident input ``t`` of ``op`` occupies while idle: one partition on
        every core of its idle plan (replicas included), or its spread blocks."""
        idle = self.idle_layout(op)
        if idle is None or rests_spread(op.expr, t):
            return _grid_bytes(self.idle_grid(op, t)[1], self.hw.num_cores)
        held = np.zeros(self.hw.num_cores, np.int64)
        held[idle[1].physical] = idle[1].partition_bytes(t)
        return held

    def idle_state(self, programs: Sequence[DeviceProgram]) -> np.ndarray:
        """Bytes per core that ``"resident"`` inputs occupy all run long: each in the idle
        placement of the first operator of its region that reads it (T10 §4.3.2)."""
        total = np.zeros(self.hw.num_cores, np.int64)
        per_program: dict[tuple, np.ndarray] = {}
        for program in programs:
            names = tuple(d.name for d in program.inputs if d.source == RESIDENT)
            if not names:
                continue
            cache_key = (id(program.ops), names)
            held = per_program.get(cache_key)
            if held is None:
                held = np.zeros(self.hw.num_cores, np.int64)
                seen: set[str] = set()
                for op in program.ops:
                    for t, name in enumerate(op.input_names):
                        if name in names and name not in seen:
                            seen.add(name)
                            held += self.idle_bytes(op, t)
                per_program[cache_key] = held
            total += held
        return total

    def program_work(self, program: DeviceProgram, index: int = 0,
                     idle: np.ndarray | None = None,
                     design: str | None = None) -> tuple[list[_Work], int]:
        """Work items of one region, and the region's peak SRAM per core (device accounting
        plus ``idle``, the resident state of the run, see :meth:`idle_state`).

        ``design`` (a preload stream run, Elk §4.5; ``None`` otherwise): off-chip inputs are
        loaded in their preload state (:meth:`preload`) and distributed when the operator
        executes (:meth:`distribute`; in no time for :data:`IDEAL`, bytes still counted)."""
        hw = self.hw
        decls = {d.name: d for d in program.inputs}
        last_use = last_reads([op.input_names for op in program.ops], program.outputs)
        # the last write of a tensor is what the host reads (a region writes each name once)
        host_out = set(getattr(program, "host_outputs", ()))
        produced: dict[str, str] = {}  # tensor -> producer op key
        resident: dict[str, np.ndarray] = {}
        used = np.zeros(hw.num_cores, np.int64) if idle is None else idle.astype(np.int64)
        peak = 0
        works = []
        sources = input_sources(program, hw.hbm_bandwidth > 0)
        for i, op in enumerate(program.ops):
            key = _op_key(op)
            check_op_inputs(op)  # per operator: the layout cache key ignores tensor names
            layout = self.layout(key, op)
            cost = self.cost(key, layout)
            for name in released(last_use, resident, i):
                used -= resident.pop(name)
            if works:  # what the previous operator leaves once it ended
                works[-1].resting = used + hw.shift_buffer_bytes
            running = used.copy()
            running[layout.physical] += cost.footprint_bytes
            if op.idle_plan is None and idle is not None:
                # resident inputs idling in this very plan are already counted in ``idle``
                for t, name in enumerate(op.input_names):
                    if name in decls and decls[name].source == RESIDENT and not rests_spread(op.expr, t):
                        running[layout.physical] -= layout.partition_bytes(t)
            running += hw.shift_buffer_bytes
            over = np.flatnonzero(running > hw.sram_bytes_per_core)
            if over.size:
                core = int(over[0])
                raise SramOverflowError(op.name, core, hw.sram_bytes_per_core, int(running[core]),
                                        label=op.label or op.expr.kind, chip=hw.name,
                                        tensors=op.expr.tensor_summary())
            peak = max(peak, int(running.max()))

            relayout, moved, estimated = NO_PHASE, 0.0, False
            by_kind: dict[str, list[int]] = {"hbm": [], "host": []}
            for t, name in enumerate(op.input_names):
                src_kind = sources[i][t]
                if src_kind == PRODUCED:
                    pkey = produced[name]
                    grid = self.c.grids.get(pkey)
                    if grid is None:
                        grid = self.c.grids[pkey] = producer_grid(self.c.layouts[pkey])
                    phase, nbytes, est = self.relayout(("op", pkey), grid, key, layout, t)
                elif src_kind == "chip":
                    access = op.expr.inputs[t]
                    grid = canonical_grid(tuple(access.shape), dtype_bytes(access.dtype), hw.num_cores)
                    phase, nbytes, est = self.relayout(("chip", access.shape, access.dtype), grid,
                                                       key, layout, t)
                elif src_kind == RESIDENT and name in decls:
                    if op.idle_plan is None and not rests_spread(op.expr, t):
                        continue  # idle in the active placement: no setup
                    grid_key, grid = self.idle_grid(op, t)
                    phase, nbytes, est = self.relayout(("idle", grid_key), grid, key, layout, t)
                elif src_kind in by_kind:
                    if src_kind == "hbm" and (hw.hbm_bandwidth <= 0 or hw.hbm_controllers <= 0):
                        raise DeviceProgramError(
                            f"operator '{short_name(op.name)}' reads '{short_name(name)}' from HBM, but chip "
                            f"'{hw.name}' has no HBM (hbm_bandwidth={hw.hbm_bandwidth})"
                        )
                    by_kind[src_kind].append(t)
                    continue
                else:  # resident constant
                    continue
                # inputs of one operator are re-laid out one after another (each a phase)
                relayout = relayout + phase
                moved += nbytes
                estimated = estimated or est
            loads = []
            need = np.zeros(hw.num_cores, np.int64)
            for kind, inputs in by_kind.items():
                if inputs and design is None:
                    load, per_core = self.load(kind, key, layout, tuple(inputs))
                elif inputs:
                    load, per_core = self.preload(kind, key, layout, tuple(inputs),
                                                  tuple(op.chunks_of(t) for t in inputs))
                else:
                    continue
                loads.append(load)
                need[layout.physical] += per_core
            work = _Work(op, program.region, index, cost, relayout, moved, estimated, loads,
                         running, need,
                         chips=tuple(int(c) for c in np.unique(self.topo.node_chip[layout.physical])))
            works.append(work)
            if design is not None:
                work.preload_space = need
                work.preloaded_bytes = sum(load.delivered_bytes for load in loads)
                chunked = tuple((t, op.chunks_of(t)) for t in sorted(by_kind["hbm"] + by_kind["host"]))
                phase, work.distributed_bytes = self.distribute(key, layout, chunked)
                work.distribute = NO_PHASE if design == IDEAL else phase
            for load, inputs in zip(loads, [v for v in by_kind.values() if v]):
                if load.kind == "hbm":
                    for t, nbytes in zip(inputs, load.distinct_bytes):
                        name = op.input_names[t]
                        works[-1].hbm_tensors[name] = max(works[-1].hbm_tensors.get(name, 0.0), nbytes)
            if op.output_name in host_out:
                works[-1].stores.append(self.store(key, layout))
            produced[op.output_name] = key
            if outlives(last_use, op.output_name, i):
                hold = np.zeros(hw.num_cores, np.int64)
                out = len(op.expr.tensors) - 1
                hold[layout.physical[layout.owners()]] = layout.partition_bytes(out)
                resident[op.output_name] = hold
                used += hold
        if works:
            works[-1].resting = used + hw.shift_buffer_bytes
        return works, peak


# -- the event-driven schedule ------------------------------------------------------------------
@dataclass
class _Slot:
    exec_start: float = -1.0
    exec_end: float = -1.0
    load_start: float = 0.0
    load_end: float = 0.0
    hbm_interval: tuple[float, float] | None = None
    host_interval: tuple[float, float] | None = None
    store_interval: tuple[float, float] | None = None  # its outputs' return to the host
    contention_delay: float = 0.0
    gate_open: bool = False
    prefetched: bool = False
    loads_done: bool = False
    ended: bool = False
    # -- preload stream runs --
    preloaded: bool = False  # the stream preloads it (load_start/load_end bound the preload)
    preload_delay: float = 0.0  # its preload's own delay from sharing links with executions


class _Events:
    """A ``heapq`` event queue: callbacks at simulated times, equal times in insertion order."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self.now = 0.0

    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (t, self._seq, fn))
        self._seq += 1

    def drain(self) -> None:
        """Run every event, in time order (events may schedule more)."""
        while self._heap:
            self.now, _, fn = heapq.heappop(self._heap)
            fn()


class _Schedule(_Events):
    """Operators on the compute array, loads on the HBM and host resources (``heapq`` events)."""

    def __init__(self, works: list[_Work], hw: HardwareSpec):
        super().__init__()
        self.works = works
        self.hw = hw
        self.slots = [_Slot() for _ in works]
        self.free = {"hbm": 0.0, "host": 0.0}

    def run(self) -> None:
        if not self.works:
            return
        self.at(0.0, lambda: self._open_gate(0))
        self.drain()

    # a load may start once its gate opens (policy) and its resource is free
    def _open_gate(self, i: int) -> None:
        slot = self.slots[i]
        if slot.gate_open:
            return
        slot.gate_open = True
        prev = self.slots[i - 1] if i else None
        # opened while the previous operator executes (rather than after it): a prefetch
        slot.prefetched = prev is not None and prev.exec_start >= 0 and self.now < prev.exec_end
        end = self.now
        slot.load_start = self.now
        for load in self.works[i].loads:
            start = max(self.now, self.free[load.kind])
            finish, delay = self._load_finish(i, load, start)
            self.free[load.kind] = finish
            interval = (start, finish)
            if load.kind == "hbm":
                slot.hbm_interval = interval
            else:
                slot.host_interval = interval
            slot.contention_delay = max(slot.contention_delay, delay)
            end = max(end, finish)
        slot.load_end = end
        self.at(end, lambda: self._loads_done(i))

    def _load_finish(self, i: int, load: _Load, start: float) -> tuple[float, float]:
        """When a load started at ``start`` ends, and its delay from sharing links with the
        operator executing meanwhile (which keeps priority on the links)."""
        alone = start + load.duration_s
        if i == 0:
            return alone, 0.0
        prev = self.slots[i - 1]
        work = self.works[i - 1]
        s, e = prev.exec_start, prev.exec_end
        net = load.network.time_s
        if prev.ended or s < 0 or start >= e or net <= 0 or work.duration_s <= 0:
            return alone, 0.0
        free_rate = preload_link_share(work.link_busy_s, work.duration_s)
        window = (e - start) * free_rate
        if free_rate > 0 and net <= window:
            net_end = start + net / free_rate
        else:
            net_end = e + (net - window)
        finish = max(start + load.source_s, net_end)
        return finish, max(0.0, finish - alone)

    def _loads_done(self, i: int) -> None:
        self.slots[i].loads_done = True
        self._try_exec(i)

    def _try_exec(self, i: int) -> None:
        slot = self.slots[i]
        if slot.exec_start >= 0 or not slot.loads_done:
            return
        if i and not self.slots[i - 1].ended:
            return  # the previous operator still runs; its end retries this one
        slot.exec_start = self.now
        slot.exec_end = self.now + self.works[i].duration_s
        self.at(self.now, lambda: self._exec_started(i))
        self.at(slot.exec_end, lambda: self._exec_ended(i))

    def _exec_started(self, i: int) -> None:
        if i + 1 < len(self.works) and self._fits_beside(i, i + 1) and not (
                self.works[i].stores and any(l.kind == "host" for l in self.works[i + 1].loads)):
            # (host inputs after a return to the host may be computed from it: they wait)
            self._open_gate(i + 1)

    def _exec_ended(self, i: int) -> None:
        self.slots[i].ended = True
        stores = self.works[i].stores
        if stores:  # the host reads its output: chip -> host on the host links, in order
            start = max(self.now, self.free["host"])
            finish = start + sum(s.duration_s for s in stores)
            self.free["host"] = finish
            self.slots[i].store_interval = (start, finish)
        if i + 1 < len(self.works):
            self._open_gate(i + 1)
            self._try_exec(i + 1)

    def _fits_beside(self, i: int, j: int) -> bool:
        """Whether operator ``j``'s loaded partitions fit in the SRAM operator ``i`` leaves."""
        need = self.works[j].prefetch_need
        if not need.any():
            return True
        free = self.hw.sram_bytes_per_core - self.works[i].used
        return bool(np.all(need <= free))


@dataclass
class _Leg:
    """One source of a running preload (HBM or host) and its network delivery."""

    load: _Load
    start: float
    remaining: float  # seconds of network delivery left at the full link rate
    net_end: float = -1.0  # when its delivery ended (-1: not yet)

    @property
    def source_end(self) -> float:
        return self.start + self.load.source_s


@dataclass
class _Active:
    """The preload in progress (preloads run one after another)."""

    work: int
    queued: int  # its position in the preload queue
    start: float
    legs: list[_Leg]
    last: float  # network progress integrated up to here
    version: int = 0


class _StreamSchedule(_Events):
    """A preload/execute instruction stream (Elk §4.5) on the timeline; see the module
    docstring ("Preload stream") for the rules and the SRAM check."""

    def __init__(self, works: list[_Work], hw: HardwareSpec, stream: Sequence[Instruction],
                 offsets: Sequence[int], design: str, base: np.ndarray):
        super().__init__()
        self.works = works
        self.hw = hw
        self.ideal = design == IDEAL
        self.slots = [_Slot() for _ in works]
        self.free = {"hbm": 0.0, "host": 0.0}
        self.pre: list[int] = []  # the preload queue (work indices, issue order)
        self.pre_after: list[int] = []  # per queued preload: the execute issued last before it
        self.exe: list[int] = []
        for ins in stream:
            w = offsets[ins.call] + ins.op
            if ins.kind == PRELOAD:
                self.pre.append(w)
                self.pre_after.append(self.exe[-1] if self.exe else -1)
                self.slots[w].preloaded = True
            else:
                self.exe.append(w)
        if self.exe != list(range(len(works))):  # run_stream checks it: programs in order
            raise DeviceProgramError("the preload stream must execute every operator once, in order")
        self.stream = [(ins.kind, offsets[ins.call] + ins.op) for ins in stream]
        self.preload_alone: list[float] = [0.0] * len(self.pre)  # its duration without contention
        self.qp = self.qe = 0
        self.active: _Active | None = None
        self.rate = 1.0  # link share the running execution leaves to the preload network
        self.running = -1
        self.last_ended = -1
        self.base = base  # SRAM per core before anything ran (resident state, shift buffer)
        self.pending = np.zeros(hw.num_cores, np.int64)  # preload space preloaded, not executed
        self.peak = int(base.max()) if base.size else 0
        self.peak_preload = 0
        self._version = 0

    def run(self) -> None:
        self._advance()
        self.drain()
        self.lags()

    # -- issue -------------------------------------------------------------------------------
    def _advance(self) -> None:
        """Start what the stream allows now: the next execute once the previous one ended and
        its preload is done; the next preload once the previous preload is done and the
        execute issued before it ended."""
        progress = True
        while progress:
            progress = False
            if self.qe < len(self.exe) and self.running < 0:
                i = self.exe[self.qe]
                if not self.slots[i].preloaded or self.slots[i].loads_done:
                    self.qe += 1
                    self._start_execute(i)
                    progress = True
            if self.active is None and self.qp < len(self.pre):
                after = self.pre_after[self.qp]
                if after < 0 or self.slots[after].ended:
                    self.qp += 1
                    self._start_preload(self.qp - 1)
                    progress = True

    def _start_execute(self, i: int) -> None:
        slot, work = self.slots[i], self.works[i]
        self._integrate()
        self.running = i
        slot.exec_start = self.now
        slot.exec_end = self.now + work.duration_s
        prev = self.slots[i - 1] if i else None
        if slot.preloaded and work.preload_space is not None:
            self.pending -= work.preload_space  # its preload space is now its execution space
        if not self.ideal:
            self._check(work.op, work.used + self.pending)
        else:
            self.peak = max(self.peak, int(work.used.max()))
        if slot.preloaded and prev is not None:
            slot.prefetched = slot.load_start < prev.exec_end
        self.at(slot.exec_end, lambda: self._end_execute(i))
        self._reschedule()

    def _end_execute(self, i: int) -> None:
        self._integrate()
        slot = self.slots[i]
        slot.ended = True
        self.running = -1
        self.last_ended = i
        stores = self.works[i].stores
        if stores:  # the host reads its output: chip -> host on the host links, in order
            start = max(self.now, self.free["host"])
            finish = start + sum(s.duration_s for s in stores)
            self.free["host"] = finish
            slot.store_interval = (start, finish)
        self._reschedule()
        self._advance()

    def _start_preload(self, q: int) -> None:
        k = self.pre[q]
        slot, work = self.slots[k], self.works[k]
        self._integrate()
        slot.load_start = self.now
        legs = []
        for load in work.loads:
            start = max(self.now, self.free[load.kind])
            self.free[load.kind] = start + load.source_s  # the source is busy that long
            legs.append(_Leg(load, start, load.network.time_s))
        self.active = _Active(k, q, self.now, legs, self.now)
        if work.preload_space is not None:
            self.pending += work.preload_space
            if self.ideal:
                self._check(work.op, self.pending, preload=True)
            else:
                self._check(work.op, self._exec_space() + self.pending)
        self._reschedule()

    def _exec_space(self) -> np.ndarray:
        """SRAM per core outside preload space now: the running operator's, else what the
        last one left (live activations), else the resident state of the run."""
        if self.running >= 0:
            return self.works[self.running].used
        if self.last_ended >= 0 and self.works[self.last_ended].resting is not None:
            return self.works[self.last_ended].resting
        return self.base

    def _check(self, op: OpProgram, need: np.ndarray, preload: bool = False) -> None:
        budget = self.hw.sram_bytes_per_core
        top = int(need.max()) if need.size else 0
        if preload:
            self.peak_preload = max(self.peak_preload, top)
        else:
            self.peak = max(self.peak, top)
            self.peak_preload = max(self.peak_preload, int(self.pending.max()))
        if top > budget:
            core = int(np.flatnonzero(need > budget)[0])
            raise SramOverflowError(op.name, core, budget, int(need[core]), label=op.label or op.expr.kind,
                                    chip=self.hw.name, tensors=op.expr.tensor_summary())

    # -- the preload in progress: network progress at the share executions leave ------------
    def _share(self) -> float:
        if self.ideal or self.running < 0:
            return 1.0
        work = self.works[self.running]
        return preload_link_share(work.link_busy_s, work.duration_s)

    def _integrate(self) -> None:
        """Advance the running preload's network delivery to ``now`` at the current share."""
        a = self.active
        if a is None:
            return
        for leg in a.legs:
            if leg.net_end >= 0:
                continue
            t0 = max(a.last, leg.start)
            if leg.remaining <= 0:
                leg.net_end = leg.start
                continue
            if self.now <= t0 or self.rate <= 0:
                continue
            done = self.rate * (self.now - t0)
            if done >= leg.remaining:
                leg.net_end = t0 + leg.remaining / self.rate
                leg.remaining = 0.0
            else:
                leg.remaining -= done
        a.last = max(a.last, self.now)

    def _reschedule(self) -> None:
        """New share, and the running preload's projected end under it."""
        self.rate = self._share()
        a = self.active
        if a is None:
            return
        self._version += 1
        a.version = self._version
        finish = self.now
        for leg in a.legs:
            if leg.net_end >= 0:
                net_end = leg.net_end
            elif leg.remaining <= 0:
                net_end = leg.start
            elif self.rate <= 0:
                return  # stalled until the execution ends (its end reschedules)
            else:
                net_end = max(self.now, leg.start) + leg.remaining / self.rate
            finish = max(finish, leg.source_end, net_end)
        version = a.version
        self.at(finish, lambda: self._preload_done(version))

    def _preload_done(self, version: int) -> None:
        a = self.active
        if a is None or a.version != version:
            return  # superseded by a reschedule
        self._integrate()
        k = a.work
        slot = self.slots[k]
        q = a.queued
        alone = a.start
        for leg in a.legs:
            if leg.net_end < 0:  # rounding: what is left ends now
                leg.net_end, leg.remaining = self.now, 0.0
            end = max(leg.source_end, leg.net_end)
            alone = max(alone, leg.start + leg.load.duration_s)
            self.free[leg.load.kind] = max(self.free[leg.load.kind], end)
            if leg.load.kind == "hbm":
                slot.hbm_interval = (leg.start, end)
            else:
                slot.host_interval = (leg.start, end)
        slot.load_end = self.now
        slot.preload_delay = max(0.0, self.now - alone)
        self.preload_alone[q] = alone - a.start
        slot.loads_done = True
        self.active = None
        self._advance()

    def lags(self) -> None:
        """Per execute, the wait that link contention caused (``_Slot.contention_delay``):
        the same stream replayed with every preload at its uncontended duration (execution
        times do not change) gives each execute's start without contention; its lag is the
        difference, and an execute's share is the growth of the lag since the previous
        execute, at most its wait."""
        cf_pre_end = [0.0] * len(self.pre)
        cf_exec_end = [0.0] * len(self.works)
        queue_of = {w: q for q, w in enumerate(self.pre)}
        q = 0
        prev_end = 0.0  # contention-free end of the last execute
        prev_lag = 0.0
        for kind, w in self.stream:
            slot = self.slots[w]
            if kind == PRELOAD:
                after = self.pre_after[q]
                start = max(cf_pre_end[q - 1] if q else 0.0, cf_exec_end[after] if after >= 0 else 0.0)
                cf_pre_end[q] = start + self.preload_alone[q]
                q += 1
                continue
            start = prev_end
            if w in queue_of:
                start = max(start, cf_pre_end[queue_of[w]])
            cf_exec_end[w] = start + (slot.exec_end - slot.exec_start)
            lag = max(0.0, slot.exec_start - start)
            wait = max(0.0, slot.exec_start - (self.slots[w - 1].exec_end if w else 0.0))
            slot.contention_delay = min(wait, max(0.0, lag - prev_lag))
            prev_end, prev_lag = cf_exec_end[w], lag


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Disjoint sorted intervals covering the union of ``intervals``."""
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two lists of disjoint sorted intervals."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def simulate_timing(
    programs: Sequence[DeviceProgram] | DeviceProgram,
    hw: HardwareSpec | None = None,
    *,
    trace: bool = False,
    progress: bool = False,
) -> TimingReport:
    """Time one model invocation: ``programs`` are its regions in execution order.

    Shapes only: constants need no ``data``. ``hw`` defaults to the hardware of the first
    program. ``trace=True`` fills :attr:`TimingReport.trace_events` (Chrome trace events;
    :meth:`TimingReport.write_trace` builds them on demand otherwise). ``progress=True`` shows
    a progress bar over the programs (needs ``tqdm``).
    """
    wall = _time.perf_counter()
    if isinstance(programs, DeviceProgram):
        programs = [programs]
    programs = [p if isinstance(p, DeviceProgram) else DeviceProgram.from_dict(p) for p in programs]
    if hw is None:
        if not programs:
            raise DeviceProgramError("simulate_timing needs at least one program or a HardwareSpec")
        hw = HardwareSpec.from_dict(programs[0].hardware)
    for program in programs:  # the program check the functional device makes too
        program.validate(hw)
    stream = run_stream(programs, hw.hbm_bandwidth > 0)
    design = _design(programs) if stream else None
    topo = make_topology(hw)
    planner = _Planner(hw, topo)
    works: list[_Work] = []
    peak = 0
    idle = planner.idle_state(programs)
    for index, program in enumerate(_progress(programs, progress)):
        region_works, region_peak = planner.program_work(program, index, idle, design)
        works.extend(region_works)
        peak = max(peak, region_peak)

    if stream:
        offsets = np.concatenate([[0], np.cumsum([len(p.ops) for p in programs])]).astype(int).tolist()
        schedule: _Schedule | _StreamSchedule = _StreamSchedule(
            works, hw, stream, offsets, design, idle + hw.shift_buffer_bytes)
    else:
        schedule = _Schedule(works, hw)
    schedule.run()
    report = _report(works, schedule, hw, topo, peak, len(programs), design)
    report.simulation_s = _time.perf_counter() - wall
    if trace:
        from runtime_sim.timing.trace import timing_trace

        report.trace_events = timing_trace(report)
    return report


def _design(programs: Sequence[DeviceProgram]) -> str:
    """The preload design of a stream run: one for every program of the run."""
    designs = {p.preload_schedule.design for p in programs}
    if len(designs) > 1:
        raise DeviceProgramError(f"the regions of one run carry different preload designs "
                                 f"{sorted(designs)}: compile the model with one design")
    return designs.pop()


def _grid_bytes(grid: BlockGrid, num_cores: int) -> np.ndarray:
    """Bytes each core holds of a block grid (edge blocks clipped to the tensor)."""
    held = np.zeros(num_cores, np.int64)
    owned = np.flatnonzero(grid.owner >= 0)
    if not grid.shape:
        held[grid.owner[owned]] += grid.itemsize
        return held
    ks = np.unravel_index(owned, grid.counts)
    size = np.full(owned.size, grid.itemsize, np.int64)
    for d, (extent, block) in enumerate(zip(grid.shape, grid.block)):
        size *= np.minimum((ks[d] + 1) * block, extent) - ks[d] * block
    np.add.at(held, grid.owner[owned], size)
    return held


def _progress(programs: list[DeviceProgram], enabled: bool):
    if not enabled or len(programs) < 2:
        return programs
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is optional: no bar then
        return programs
    return tqdm(programs, desc="timing regions", unit="region")


def _report(works: list[_Work], schedule: _Schedule | _StreamSchedule, hw: HardwareSpec,
            topo: Topology, peak: int, num_programs: int, design: str | None = None) -> TimingReport:
    per_op: list[OpTiming] = []
    exec_iv, hbm_iv, load_iv = [], [], []
    regions: list[dict[str, Any]] = []
    stall_total = exposed_total = 0.0
    peak_prefetch = peak
    peak_preload = 0
    prev_end = 0.0
    for i, (work, slot) in enumerate(zip(works, schedule.slots)):
        cost = work.cost
        hbm = next((l for l in work.loads if l.kind == "hbm"), None)
        host = next((l for l in work.loads if l.kind == "host"), None)
        wait = max(0.0, slot.exec_start - prev_end)
        # contention that postponed this operator: only the part of the load's delay that
        # ran past the previous operator's end
        exposed = min(slot.contention_delay, wait)
        stall = (work.distribute.stall_s + work.relayout.stall_s + cost.shift.stall_s
                 + cost.reduction.stall_s + exposed)
        stall_total += stall
        exposed_total += exposed
        if slot.prefetched and i and design is None:
            peak_prefetch = max(peak_prefetch, int((works[i - 1].used + work.prefetch_need).max()))
            peak_preload = max(peak_preload, int(work.prefetch_need.max()))
        compute = cost.compute_s + cost.reduction_compute_s + cost.epilogue_s
        hbm_s = (slot.hbm_interval[1] - slot.hbm_interval[0]) if slot.hbm_interval else 0.0
        host_s = (slot.host_interval[1] - slot.host_interval[0]) if slot.host_interval else 0.0
        store = slot.store_interval
        host_out_s = (store[1] - store[0]) if store else 0.0
        steps_s = cost.compute_s + cost.shift.time_s
        inter = (work.relayout.inter_bytes + cost.shift.inter_bytes + cost.reduction.inter_bytes
                 + work.distribute.inter_bytes)
        per_op.append(OpTiming(
            name=work.op.name, region=work.region, kind=work.op.expr.kind, cores=cost.cores,
            start_s=slot.exec_start, end_s=slot.exec_end, compute_s=compute,
            transfer_s=work.transfer_s, link_busy_s=work.link_busy_s, hbm_s=hbm_s,
            stall_s=stall, host_s=host_s, wait_s=wait,
            steps=cost.steps, flops=cost.flops,
            shift_bytes=cost.rotation_bytes + cost.reduction_bytes,
            rotation_bytes=cost.rotation_bytes, reduction_bytes=cost.reduction_bytes,
            relayout_bytes=work.relayout_bytes, inter_chip_bytes=inter,
            hbm_bytes=sum(work.hbm_tensors.values()),
            hbm_delivered_bytes=hbm.unique_bytes if hbm else 0.0,
            host_bytes=host.unique_bytes if host else 0.0,
            host_out_bytes=sum(s.unique_bytes for s in work.stores),
            host_out_s=host_out_s, host_out_start_s=store[0] if store else 0.0,
            load_start_s=slot.load_start if work.loads else 0.0,
            load_end_s=slot.load_end if work.loads else 0.0,
            hbm_start_s=slot.hbm_interval[0] if slot.hbm_interval else 0.0,
            host_start_s=slot.host_interval[0] if slot.host_interval else 0.0,
            prefetched=bool(work.loads) and slot.prefetched,
            chips=work.chips,
            sram_bytes_per_core=int(work.used.max()),
            relayout_s=work.relayout.time_s, steps_s=steps_s, shift_s=cost.shift.time_s,
            reduction_s=cost.reduction.time_s + cost.reduction_compute_s,
            epilogue_s=cost.epilogue_s, distinct_shift_phases=cost.distinct_shift_phases,
            estimated=work.relayout_estimated or cost.shift_sampled,
            preloaded=slot.preloaded,
            preload_start_s=slot.load_start if slot.preloaded else 0.0,
            preload_end_s=slot.load_end if slot.preloaded else 0.0,
            preload_stall_s=slot.preload_delay if slot.preloaded else slot.contention_delay,
            interconnect_stall_s=exposed, distribute_s=work.distribute.time_s,
            distributed_bytes=work.distributed_bytes,
            preloaded_bytes=(work.preloaded_bytes if design is not None
                             else sum(l.delivered_bytes for l in work.loads)),
            preload_space_bytes_per_core=(int(work.preload_space.max())
                                          if work.preload_space is not None else 0),
        ))
        exec_iv.append((slot.exec_start, slot.exec_end))
        if slot.hbm_interval:
            hbm_iv.append(slot.hbm_interval)
        for iv in (slot.hbm_interval, slot.host_interval):
            if iv and iv[1] > iv[0]:
                load_iv.append(iv)
        if not regions or regions[-1]["program"] != work.program:
            regions.append({"name": work.region, "program": work.program,
                            "start_s": slot.exec_start, "end_s": slot.exec_end, "ops": 0})
        regions[-1]["end_s"] = slot.exec_end
        regions[-1]["ops"] += 1
        prev_end = slot.exec_end

    store_ends = [s.store_interval[1] for s in schedule.slots if s.store_interval]
    total = max([e for _, e in exec_iv] + store_ends, default=0.0)
    compute = sum(o.compute_s for o in per_op)
    transfer = sum(o.transfer_s for o in per_op)
    hbm_s = sum(e - s for s, e in hbm_iv)
    if design is not None:  # preloads are issued in their own order
        hbm_iv.sort()
    overlap = _intersection(hbm_iv, exec_iv)
    loading = _union(load_iv)
    busy_exec = _union([iv for iv in exec_iv if iv[1] > iv[0]])
    preload_s = sum(e - s for s, e in loading)
    preload_overlap = _intersection(loading, busy_exec)
    exec_s = sum(e - s for s, e in busy_exec)
    flops = sum(o.flops for o in per_op)
    distinct: dict[tuple[int, str], float] = {}  # (region call, tensor) -> distinct bytes
    for work in works:
        for name, nbytes in work.hbm_tensors.items():
            distinct[(work.program, name)] = max(distinct.get((work.program, name), 0.0), nbytes)
    hbm_bytes = sum(distinct.values())
    hbm_delivered = sum(o.hbm_delivered_bytes for o in per_op)
    moved = sum(o.shift_bytes + o.relayout_bytes for o in per_op) + sum(
        l.delivered_bytes for w in works for l in w.loads) + sum(w.distributed_bytes for w in works)
    utilization = {
        "flops": flops / (total * hw.peak_matrix_flops) if total > 0 else 0.0,
        # bytes received by cores over their links against every core receiving at full rate
        "interconnect": moved / (total * hw.num_cores * hw.link_bandwidth) if total > 0 else 0.0,
        # distinct bytes only: a copy read twice (once per chip) is not useful bandwidth
        "hbm": hbm_bytes / (total * hw.hbm_bandwidth) if total > 0 and hw.hbm_bandwidth > 0 else 0.0,
    }
    # links in use, hop latencies included (the share rule counts held bandwidth only, busy_s)
    link_time = transfer + sum(l.network.time_s for w in works for l in w.loads)
    link_capacity = total * (2 if design == IDEAL else 1)
    if design is not None:  # the SRAM timeline (the ideal design: execution space alone)
        peak = peak_prefetch = schedule.peak
        peak_preload = schedule.peak_preload
    stream = {
        "design": design or "", "preload_s": preload_s,
        "preload_only_s": preload_s - preload_overlap, "execute_only_s": exec_s - preload_overlap,
        "preload_overlap_s": preload_overlap, "interconnect_stall_s": exposed_total,
        "preload_stall_s": sum(o.preload_stall_s for o in per_op),
        "hbm_utilization": utilization["hbm"],
        "interconnect_utilization": link_time / link_capacity if total > 0 else 0.0,
        "flops_utilization": utilization["flops"],
        "achieved_flops": flops / total if total > 0 else 0.0,
        "preloaded_bytes": sum(o.preloaded_bytes for o in per_op),
        "distributed_bytes": sum(o.distributed_bytes for o in per_op),
        "preloads": len(schedule.pre) if design is not None else 0, "executes": len(per_op),
        "peak_preload_bytes_per_core": peak_preload,
    }
    bounds = lower_bounds(per_op, hw)
    return TimingReport(
        hardware=hw.name, topology=topo.kind if hw.num_chips == 1 else f"{topo.kind} x{hw.num_chips} chips",
        total_s=total, compute_s=compute, transfer_s=transfer, hbm_s=hbm_s, overlap_s=overlap,
        stall_s=stall_total, host_s=sum(o.host_s + o.host_out_s for o in per_op),
        idle_s=max(0.0, total - compute - transfer), num_ops=len(per_op), num_regions=num_programs,
        hbm_bytes=hbm_bytes, hbm_delivered_bytes=hbm_delivered,
        host_bytes=sum(o.host_bytes for o in per_op),
        host_out_bytes=sum(o.host_out_bytes for o in per_op),
        shift_bytes=sum(o.shift_bytes for o in per_op),
        rotation_bytes=sum(o.rotation_bytes for o in per_op),
        reduction_bytes=sum(o.reduction_bytes for o in per_op),
        relayout_bytes=sum(o.relayout_bytes for o in per_op),
        inter_chip_bytes=sum(o.inter_chip_bytes for o in per_op),
        steps=sum(o.steps for o in per_op), peak_sram_bytes_per_core=peak,
        peak_sram_with_prefetch_bytes_per_core=peak_prefetch, flops=flops,
        utilization=utilization, per_op=per_op, regions=regions, hw=hw, **bounds, **stream,
    )


def lower_bounds(per_op: list[OpTiming], hw: HardwareSpec) -> dict[str, Any]:
    """Fill every operator's :attr:`OpTiming.lower_bound_s` and name the operators and kinds
    whose time is more than :data:`SLOW_FACTOR` times their lower bound.

    An operator's time is what it costs the compute array: its execution plus the wait for its
    loads (``wait_s + duration_s``; these add up to the makespan, minus the last return to the
    host). Its lower bound is the largest of what no plan can avoid on this system:

    * ``flops``: its FLOPs on every core of the system at the peak of the unit that runs it
      (matrix unit for sums of products, vector unit otherwise, ``schedules`` templates);
    * ``hbm``: its distinct HBM bytes at the full HBM bandwidth;
    * ``host``: its host bytes, both directions, over all chips' host links;
    * ``sync``: one bulk-synchronous step, ``sync_cycles`` (every operator runs at least one).
    """
    from schedules import template_for

    peak = {"matrix": hw.num_cores * hw.matrix_flops_per_cycle * hw.clock_hz,
            "vector": hw.num_cores * hw.vector_flops_per_cycle * hw.clock_hz}
    kinds: dict[str, dict[str, Any]] = {}
    slow_ops = []
    for op in per_op:
        unit = getattr(template_for(op.kind), "unit", "vector")
        terms = {
            "flops": op.flops / peak.get(unit, peak["vector"]),
            "hbm": op.hbm_bytes / hw.hbm_bandwidth if hw.hbm_bandwidth > 0 else 0.0,
            "host": (op.host_bytes + op.host_out_bytes) / (hw.host_bandwidth * hw.num_chips),
            "sync": hw.sync_cycles / hw.clock_hz,
        }
        op.bound_by = max(terms, key=terms.get)
        op.lower_bound_s = terms[op.bound_by]
        spent = op.wait_s + op.duration_s
        row = kinds.setdefault(op.kind, {"kind": op.kind, "ops": 0, "time_s": 0.0, "lower_bound_s": 0.0})
        row["ops"] += 1
        row["time_s"] += spent
        row["lower_bound_s"] += op.lower_bound_s
        if op.lower_bound_s > 0 and spent > SLOW_FACTOR * op.lower_bound_s:
            slow_ops.append({"name": op.name, "region": op.region, "kind": op.kind,
                             "start_s": op.start_s, "time_s": spent, "lower_bound_s": op.lower_bound_s,
                             "bound_by": op.bound_by, "ratio": spent / op.lower_bound_s})
    for row in kinds.values():
        row["ratio"] = row["time_s"] / row["lower_bound_s"] if row["lower_bound_s"] > 0 else 0.0
    op_kinds = sorted(kinds.values(), key=lambda r: -r["time_s"])
    slow_ops.sort(key=lambda r: -(r["time_s"] - r["lower_bound_s"]))
    return {"op_kinds": op_kinds, "slow_kinds": [r for r in op_kinds if r["ratio"] > SLOW_FACTOR],
            "slow_ops": slow_ops}
