"""Work items of a timing run and their costing: what each operator instance costs and needs.

:class:`WorkBuilder` turns device programs into :class:`Work` items, one per operator
instance, costing each distinct thing once (the same layer repeated in a model costs once):
each operator's homogeneous steps in closed form (:mod:`runtime_sim.timing.opcost`), each
transfer phase on the topology (:mod:`runtime_sim.machine.topology`), each off-chip load or
preload, each distribution phase and each return to the host. It decides nothing -- the
device never plans: the schedulers (:mod:`runtime_sim.timing.prefetch_scheduler`,
:mod:`runtime_sim.timing.preload_stream_scheduler`) put the items on the timeline in the order the
compiler's programs give.

Data sources of an operator input (``TensorDecl.source``, program format):

* produced earlier in the region -> re-laid out from the producer's ring-0 cores over the
  interconnect (exact box overlaps, :mod:`runtime_sim.contract.relayout`);
* ``"chip"`` region input -> re-laid out from a canonical block layout over all cores
  (estimate: the producing region's layout is not known to this program);
* ``"resident"`` region input (model state kept on chip, T10 §4.3.2) -> it waits in the
  placement of its reader's :attr:`~runtime_sim.contract.program.OpProgram.idle_plan` (or spread in
  near-even blocks over all cores, :data:`~runtime_sim.contract.plan.IDLE_SPREAD`); the setup phase
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
  (:attr:`~runtime_sim.contract.program.DeviceProgram.leaving_tensors`: a host output, or a piece of one
  the host joins), goes back chip -> host over the
  same links when its producer ends: each chip's bytes of it at ``host_bandwidth``, gathered
  from the cores that hold it (the delivery's network cost, mirrored). Host links serve their
  transfers in order, so a later host input (which may depend on it) starts after it, and an
  operator reading host inputs is not prefetched while such a return is pending;
* a constant -> its entry's ``"source"`` if given, else ``"hbm"`` on a chip with HBM and
  otherwise resident: weights stay on chip in the operator's placement (T10 §4.3.2 keeps the
  model on chip and moves only inputs and outputs; the idle-to-active setup is not modelled).

In a preload stream run (Elk §4.5) the off-chip inputs are costed in their preload state
instead, and their distribution phase is part of the operator's execution (see
:mod:`runtime_sim.timing.preload_stream_scheduler`).

SRAM: per core, partitions of the running operator plus on-chip intermediates still needed
plus the shift buffer plus the idle placements of every ``"resident"`` input of the run
(:func:`runtime_sim.contract.resting.resident_state`), exactly as
:class:`runtime_sim.functional.device.SimulatedDevice` counts it; a program that would
overflow raises :class:`SramOverflowError` as the device does. Re-layout bytes follow the
same contract rule as the device's count (:mod:`runtime_sim.contract.resting`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError, short_name
from runtime_sim.contract.expr import dtype_bytes
from runtime_sim.contract.hbm_reads import read_key
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout, check_op_inputs, checked_layout, cost_key
from runtime_sim.contract.lifetimes import last_reads, outlives, released
from runtime_sim.contract.program import DeviceProgram, OpProgram
from runtime_sim.contract.relayout import (
    BlockGrid,
    Boxes,
    canonical_grid,
    input_boxes,
    producer_grid,
)
from runtime_sim.contract.resting import (
    FROM_CHIP,
    FROM_IDLE,
    FROM_PRODUCER,
    RESIDENT,
    idle_bytes,
    idle_op,
    in_place_bytes,
    relayout_origin,
    resident_grid,
    resident_state,
)
from runtime_sim.contract.sram_budget import IDEAL, check_sram
from runtime_sim.contract.stream import input_sources
from runtime_sim.machine.op_transfers import host_return, load_delivery, relayout_phase
from runtime_sim.machine.phase_cost import NO_PHASE, PhaseCost
from runtime_sim.machine.preload_delivery import distribution_phase, preload_delivery
from runtime_sim.machine.topology_base import Topology
from runtime_sim.timing.opcost import OpCost, op_cost



@dataclass
class Load:
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

    @property
    def bound_by(self) -> str:
        """The cut that bounds this load: its source (``"hbm"``: the controllers' read
        bandwidth; ``"host"``: the host link) when that is the slower side, else the network's
        (:attr:`~runtime_sim.machine.phase_cost.PhaseCost.bound_by`: edge ports, controller
        ports, injection, links, ports, inter-chip)."""
        source = "hbm" if self.kind == "hbm" else "host"
        if self.source_s >= self.network.time_s:
            return source
        return self.network.bound_by or source


@dataclass
class Work:
    """One operator instance: its cost and what it needs before it can run."""

    op: OpProgram
    region: str
    program: int  # index of its program in the simulated sequence
    cost: OpCost
    relayout: PhaseCost
    relayout_bytes: float
    relayout_estimated: bool
    loads: list[Load]
    used: np.ndarray  # SRAM per core while it runs (device accounting), shift buffer included
    prefetch_need: np.ndarray  # bytes per core its loads deposit (its loaded partitions)
    stores: list[Load] = field(default_factory=list)  # its outputs the host reads (chip -> host)
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
    """What :class:`WorkBuilder` has costed, by what each cost depends on: a model repeats
    layers, and costing each distinct one once keeps long runs fast."""

    layouts: dict[str, OpLayout] = field(default_factory=dict)
    costs: dict[str, OpCost] = field(default_factory=dict)
    relayouts: dict[tuple, tuple[PhaseCost, float, bool]] = field(default_factory=dict)
    loads: dict[tuple, tuple[Load, np.ndarray]] = field(default_factory=dict)
    boxes: dict[tuple[str, int], Boxes] = field(default_factory=dict)
    grids: dict[str, BlockGrid] = field(default_factory=dict)


def _op_key(op: OpProgram) -> str:
    """What an operator's timing depends on (:func:`runtime_sim.contract.layout.cost_key`)."""
    return cost_key(op.expr, op.plan)


class WorkBuilder:
    """Turns programs into :class:`Work` items, costing each distinct thing once.

    It costs what the programs say (plans, sources, chunks, idle plans) and decides nothing:
    the device never plans."""

    def __init__(self, hw: HardwareSpec, topo: Topology):
        self.hw = hw
        self.topo = topo
        # re-layout and distribution phases depend on the network, not on the programs'
        # other operators: shared with every run on this network (Topology.phase_memo)
        self.c = _Caches(relayouts=topo.phase_memo)

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
            # a gathered input's rows are data: the uniform-ids estimate (gather_relayout)
            hit = self.c.relayouts[cache_key] = relayout_phase(self.topo, grid, layout, t,
                                                               self.boxes(key, layout, t))
        return hit

    def load(self, kind: str, key: str, layout: OpLayout, inputs: tuple[int, ...]) -> tuple[Load, np.ndarray]:
        cache_key = (kind, key, inputs)
        hit = self.c.loads.get(cache_key)
        if hit is not None:
            return hit
        need = np.zeros(layout.num_cores, np.int64)
        for t in inputs:
            need += layout.partition_bytes(t)
        network, source_s, unique, delivered, distinct = load_delivery(
            self.topo, kind, layout, [self.boxes(key, layout, t) for t in inputs])
        hit = (Load(kind, source_s, network, unique, delivered, distinct), need)
        self.c.loads[cache_key] = hit
        return hit

    def preload(self, kind: str, key: str, layout: OpLayout, inputs: tuple[int, ...],
                chunks: tuple[int, ...]) -> tuple[Load, np.ndarray]:
        """One operator's preload from one off-chip source in its preload state (Elk §4.3,
        :func:`runtime_sim.machine.preload_delivery.preload_delivery`): input ``inputs[i]`` cut into
        ``chunks[i]`` chunks. Returns the load and the preload space per numbered core."""
        cache_key = ("preload", kind, key, inputs, chunks)
        hit = self.c.loads.get(cache_key)
        if hit is not None:
            return hit
        d = preload_delivery(self.topo, kind, layout, inputs, chunks,
                             [self.boxes(key, layout, t) for t in inputs])
        hit = (Load(kind, d.source_s, d.network, d.unique_bytes, d.delivered_bytes,
                     d.distinct_bytes), d.space)
        self.c.loads[cache_key] = hit
        return hit

    def distribute(self, key: str, layout: OpLayout, chunked: tuple[tuple[int, int], ...]) -> tuple[PhaseCost, float]:
        """The distribution phase of an operator's chunked inputs
        (:func:`runtime_sim.machine.preload_delivery.distribution_phase`) and its bytes."""
        return distribution_phase(self.topo, layout, chunked)  # costed once per network

    def store(self, key: str, layout: OpLayout) -> Load:
        """The chip -> host return of an operator's output: the cores holding it (ring 0) send
        their partitions over their chip's host link (``host_bandwidth`` per chip); the network
        leg is costed as the mirrored delivery (cores -> host node)."""
        cache_key = ("host_out", key)
        hit = self.c.loads.get(cache_key)
        if hit is not None:
            return hit[0]
        network, source_s, total = host_return(self.topo, layout)
        load = Load("host_out", source_s, network, total, total)
        self.c.loads[cache_key] = (load, np.zeros(0))
        return load

    def idle_layout(self, op: OpProgram) -> tuple[str, OpLayout] | None:
        """Key and layout of the plan that ``op``'s resident inputs rest in between runs
        (:func:`runtime_sim.contract.resting.idle_op`); ``None`` for :data:`IDLE_SPREAD`."""
        idle_op_ = idle_op(op)
        if idle_op_ is None:
            return None
        idle_key = _op_key(idle_op_)
        return idle_key, self.layout(idle_key, idle_op_)

    def idle_grid(self, op: OpProgram, t: int) -> tuple[str, BlockGrid]:
        """Where resident input ``t`` of ``op`` idles, as blocks on cores (the source of its
        setup re-layout, :func:`runtime_sim.contract.resting.resident_grid`)."""
        idle = self.idle_layout(op)
        access = op.expr.inputs[t]
        grid_key = f"{idle[0]}#{t}" if idle is not None else f"spread#{access.tensor_shape}#{access.dtype}"
        grid = self.c.grids.get(grid_key)
        if grid is None:
            grid = self.c.grids[grid_key] = resident_grid(idle[1] if idle is not None else None,
                                                          access, t, self.hw.num_cores)
        return grid_key, grid

    def idle_bytes(self, op: OpProgram, t: int) -> np.ndarray:
        """Bytes per core resident input ``t`` of ``op`` occupies while idle
        (:func:`runtime_sim.contract.resting.idle_bytes`)."""
        idle = self.idle_layout(op)
        return idle_bytes(op, t, idle[1] if idle is not None else None, self.hw.num_cores,
                          self.idle_grid(op, t)[1])

    def idle_state(self, programs: Sequence[DeviceProgram]) -> np.ndarray:
        """Bytes per core that ``"resident"`` inputs occupy all run long
        (:func:`runtime_sim.contract.resting.resident_state`, as the functional device counts)."""
        return resident_state(programs, self.hw, self.idle_bytes)

    def program_work(self, program: DeviceProgram, index: int = 0,
                     idle: np.ndarray | None = None,
                     design: str | None = None,
                     on_op: Callable[[], None] | None = None) -> tuple[list[Work], int]:
        """Work items of one region, and the region's peak SRAM per core (device accounting
        plus ``idle``, the resident state of the run, see :meth:`idle_state`).

        ``design`` (a preload stream run, Elk §4.5; ``None`` otherwise): off-chip inputs are
        loaded in their preload state (:meth:`preload`) and distributed when the operator
        executes (:meth:`distribute`; in no time for :data:`IDEAL`, bytes still counted).
        ``on_op()`` is called after each operator costed (a caller's progress report)."""
        hw = self.hw
        resident_names = {d.name for d in program.inputs if d.source == RESIDENT}
        last_use = last_reads([op.input_names for op in program.ops], program.staying_outputs)
        # the last write of a tensor is what the host reads (a region writes each name once)
        host_out = set(program.leaving_tensors)
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
            if works:  # what the previous operator leaves once it ended: the tensors this
                # one reads last are still held until it starts (as the functional device)
                works[-1].resting = used + hw.shift_buffer_bytes
            for name in released(last_use, resident, i):
                used -= resident.pop(name)
            running = used.copy()
            running[layout.physical] += cost.footprint_bytes
            if idle is not None:
                # resident inputs idling in this very plan are already counted in ``idle``
                running[layout.physical] -= in_place_bytes(op, layout, resident_names)
            running += hw.shift_buffer_bytes
            # its execution side (the preload side is checked on the stream's timeline)
            check_sram(op.name, hw, running, label=op.label or op.expr.kind,
                       tensors=op.expr.tensor_summary())
            peak = max(peak, int(running.max()))

            relayout, moved, estimated = NO_PHASE, 0.0, False
            by_kind: dict[str, list[int]] = {"hbm": [], "host": []}
            for t, name in enumerate(op.input_names):
                src_kind = sources[i][t]
                # where it waits (runtime_sim.contract.resting, as the functional device counts)
                origin = relayout_origin(op, t, src_kind, name in resident_names)
                if origin == FROM_PRODUCER:
                    pkey = produced[name]
                    grid = self.c.grids.get(pkey)
                    if grid is None:
                        grid = self.c.grids[pkey] = producer_grid(self.c.layouts[pkey])
                    phase, nbytes, est = self.relayout(("op", pkey), grid, key, layout, t)
                elif origin == FROM_CHIP:
                    access = op.expr.inputs[t]
                    grid = canonical_grid(access.tensor_shape, dtype_bytes(access.dtype), hw.num_cores)
                    phase, nbytes, est = self.relayout(("chip", access.tensor_shape, access.dtype), grid,
                                                       key, layout, t)
                elif origin == FROM_IDLE:
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
                else:  # a resident constant, or resident state idling in this placement
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
            work = Work(op, program.region, index, cost, relayout, moved, estimated, loads,
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
                        name = read_key(op.expr, t, op.input_names)
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
            if on_op is not None:
                on_op()
        if works:
            works[-1].resting = used + hw.shift_buffer_bytes
        return works, peak


