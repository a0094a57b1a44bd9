"""The program interpreter: runs a whole region (a :class:`DeviceProgram`) with the device operations.

:meth:`Interpreter.run` executes one offloaded region on data as the host runtime does
(T10 §4.4, §5): region inputs, constants and outputs of earlier operators of the region are
placed in each operator's initial placement, and every operator is allocated, computed
(its compute-shift steps), reduced, read and freed with the operations of
:class:`~runtime_sim.functional.cores.Cores`. Intermediates stay on chip between operators
(their SRAM is held on the producer's ring-0 cores).

Operators with a :class:`~runtime_sim.contract.plan.VgmPlan` (the load-compute-store baseline on a
virtual global memory, T10 §2.2, Fig. 2a) run through :mod:`runtime_sim.functional.vgm_exec` instead,
with the region's tensors in home slices on every core.

A program with Elk's preload/execute stream (Elk §2.2, §4.5) runs its call's segment of the
stream instruction by instruction: ``preload`` fills the preload space of the operator's cores
from the call's HBM store (:mod:`runtime_sim.functional.preload_store`); ``execute`` allocates
the operator, distributes its preloaded inputs, places the others and computes. Every
region's statistics go to :class:`~runtime_sim.functional.run_counters.RunCounters`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from runtime_sim.contract.constants import decode_constant
from runtime_sim.contract.errors import DeviceProgramError, UnsupportedDtypeError, short_name
from runtime_sim.contract.expr import dtype_bytes, gather_rows
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.hbm_reads import call_reads, op_reads, run_hbm_bytes
from runtime_sim.contract.layout import OpLayout, ShiftEvent, checked_layout, cost_key
from runtime_sim.contract.lifetimes import last_reads, outlives, released
from runtime_sim.contract.plan import VgmPlan
from runtime_sim.contract.preload_chunks import op_preload
from runtime_sim.contract.program import EXECUTE, PRELOAD, DeviceProgram, OpProgram
from runtime_sim.contract.relayout import (
    BlockGrid,
    canonical_grid,
    input_boxes,
    input_relayout,
    producer_grid,
)
from runtime_sim.contract.resting import (
    FROM_CHIP,
    FROM_IDLE,
    FROM_PRODUCER,
    RESIDENT,
    idle_op,
    in_place_bytes,
    relayout_origin,
    resident_grid,
    resident_state,
)
from runtime_sim.contract.sram_budget import separate_preload_sram
from runtime_sim.contract.stream import (
    OFFCHIP_SOURCES,
    Instruction,
    call_segment,
    has_stream,
    input_sources,
    offchip_inputs,
)
from runtime_sim.contract.validation import validate_program
from runtime_sim.functional.cores import Cores
from runtime_sim.functional.link_hops import LinkHops
from runtime_sim.functional.placement import check_dtype
from runtime_sim.functional.preload_store import PreloadStore
from runtime_sim.functional.run_counters import RegionSram, RunCounters, count_value
from runtime_sim.functional.sram import SramLedger
from runtime_sim.functional.vgm_exec import VgmRegion
from schedules.actions import ACTION_METRICS, action_metrics, op_actions, transfer_actions


class Interpreter:
    """Runs device programs on the cores of one device, recording each run's statistics.

    ``lock`` is the device's: one region runs at a time, and statistics are read between
    regions, never during one.
    """

    def __init__(self, cores: Cores, preloads: PreloadStore, sram: SramLedger,
                 counters: RunCounters, lock: threading.RLock) -> None:
        self._cores = cores
        self._preloads = preloads
        self._sram = sram
        self._counters = counters
        self._lock = lock
        self._grids: dict[str, BlockGrid] = {}  # outputs of the region's operators, as placed
        #: what each of those grids depends on (its producer's expression and plan): the
        #: byte-hop counter prices a re-layout from it once
        self._grid_keys: dict[str, str] = {}
        self._env: Mapping[str, np.ndarray] = {}  # tensors of the current call

    def run(self, program: DeviceProgram | Mapping[str, Any] | str,
            inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Execute one offloaded region on data and return its outputs (T10 §4.4, §5).

        Region inputs, constants and outputs of earlier operators of the region are placed
        in each operator's initial placement; intermediates stay on chip between operators
        (their SRAM is held on the producer's ring-0 cores) and placing them is counted as
        re-layout traffic (T10 §5: "the program may rearrange the data on cores").

        A program with a preload schedule (Elk §4.5) runs its call's segment of the stream
        instead, instruction by instruction (:meth:`_execute`); the segment is checked
        against the run so far (:func:`runtime_sim.contract.stream.call_segment`) before any data
        moves.
        """
        if isinstance(program, str):
            program = DeviceProgram.from_json(program)
        elif not isinstance(program, DeviceProgram):
            program = DeviceProgram.from_dict(program)
        hw = HardwareSpec.from_dict(program.hardware)
        validate_program(program, hw)  # the one program check, shared with the timing simulators
        with self._lock:
            self._cores.configure(hw)
            run = self._counters.run
            continuing = run.continues_with(program)
            call = len(run.programs) if continuing else 0
            run.failed = True  # until this call is recorded
            instructions: list[Instruction] | None = None
            later: list[Instruction] = []
            if continuing:
                has_stream([*run.programs, program])  # all of a run, or none
            if program.preload_schedule is not None:
                if any(isinstance(op.plan, VgmPlan) for op in program.ops):
                    raise DeviceProgramError(
                        f"region '{short_name(program.region)}': load-compute-store (VGM) operators do not "
                        "run a preload schedule")
                carried = run.pending.get(call, []) if continuing else []
                instructions, later = call_segment(program, call, len(program.run_order) or None,
                                                   carried, hw.hbm_bandwidth > 0)
            env, input_bytes = self._region_inputs(program, inputs)
            # model state kept on chip all run long, this region's and the earlier ones' of
            # the run (the SRAM checks count it; the run's statistics add the whole run's)
            resting = resident_state([program], hw)
            before = run.resting() if continuing else np.zeros(0, np.int64)
            if before.size == resting.size:
                resting_so_far = before + resting
            else:
                resting_so_far = resting  # the first region of the run
            stats, sram = self._execute(program, env, instructions, resting_so_far)
            sram.resting = resting
            stats["input_bytes"] = input_bytes
            outputs = []
            for name in program.outputs:
                join = program.host_joins.get(name)
                if join is not None:  # the pieces came back to the host as they were produced
                    outputs.append(np.concatenate([env[p] for p in join.pieces], axis=join.dim))
                    continue
                if name not in env:
                    raise DeviceProgramError(f"region '{short_name(program.region)}' never "
                                             f"computes output '{short_name(name)}'")
                outputs.append(env[name])
            stats["output_bytes"] = int(sum(o.nbytes for o in outputs))
            self._counters.record(program, stats, continuing, sram)
            for ins in later:
                self._counters.run.pending.setdefault(ins.call, []).append(ins.op)
            return outputs

    def _region_inputs(self, program: DeviceProgram,
                       inputs: Sequence[np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
        hw = self._cores.hw
        where = f"region '{short_name(program.region)}'"
        if len(inputs) != len(program.inputs):
            raise DeviceProgramError(
                f"{where} takes {len(program.inputs)} inputs, got {len(inputs)}"
            )
        env: dict[str, np.ndarray] = {}
        nbytes = 0
        for decl, value in zip(program.inputs, inputs):
            check_dtype(hw, decl.name, decl.dtype, where, mask=True, index=True)
            arr = np.asarray(value)
            if str(arr.dtype) != decl.dtype:
                raise UnsupportedDtypeError(
                    f"{where}: input '{decl.name}' is {arr.dtype}, but the program declares {decl.dtype}"
                )
            if tuple(arr.shape) != tuple(decl.shape):
                raise DeviceProgramError(
                    f"{where}: input '{decl.name}' has shape {list(arr.shape)}, expected {list(decl.shape)}"
                )
            env[decl.name] = arr
            nbytes += arr.nbytes
        for name, entry in program.constants.items():
            arr = decode_constant(name, entry)
            check_dtype(hw, name, str(arr.dtype), where, mask=True, index=True)
            env[name] = arr
            nbytes += arr.nbytes
        return env, nbytes

    def _execute(self, program: DeviceProgram, env: dict[str, np.ndarray],
                 instructions: Sequence[Instruction] | None = None,
                 resting: np.ndarray | None = None) -> tuple[dict[str, Any], RegionSram]:
        """Run a region's operators in program order, or, with ``instructions`` (this call's
        checked preload stream, :func:`runtime_sim.contract.stream.call_segment`), exactly in stream
        order: ``preload`` moves the operator's off-chip inputs from the HBM store into the
        preload space of its cores (:meth:`PreloadStore.preload_async
        <runtime_sim.functional.preload_store.PreloadStore.preload_async>`); ``execute``
        allocates it, distributes the preloaded inputs (:meth:`Cores.distribute
        <runtime_sim.functional.cores.Cores.distribute>`), places the others as without a
        stream, and computes.

        Preloads an earlier call issued for this call's operators come first in
        ``instructions``: the VM hands the device one region's inputs per call, so that data
        does not exist on the device before this call starts; the functional device performs
        them here, before the call's first instruction (and counts their preload space from
        here), while the timing simulator times them where the stream issues them.

        ``resting``: the run's resident state so far, per core (held besides everything,
        :func:`runtime_sim.contract.resting.resident_state`). Returns the region's statistics
        and its SRAM needs without the resident state (:class:`RegionSram`).
        """
        cores, sram = self._cores, self._sram
        hw = cores.hw
        ops = program.ops
        sram.labels = {op.name: op.label or op.expr.kind for op in ops}
        last_use = last_reads([op.input_names for op in ops], program.staying_outputs)
        produced: set[str] = set()
        op_stats: list[dict[str, Any] | None] = [None] * len(ops)
        stream = instructions is not None
        offchip = offchip_inputs(program, hw.hbm_bandwidth > 0) if stream else [[] for _ in ops]
        preloaded: dict[int, int] = {}  # operator -> bytes its preload delivered
        layouts: dict[int, OpLayout] = {}
        if stream:
            # every layout and chunk count is checked before any data moves
            for ins in instructions:
                if ins.op not in layouts:
                    layouts[ins.op] = checked_layout(ops[ins.op], hw)
                    op_preload(layouts[ins.op], offchip[ins.op], op=ops[ins.op])
            self._preloads.hbm = {name: env[name] for j, op in enumerate(ops)
                                  for t, name in enumerate(op.input_names) if t in offchip[j]}
        sources = input_sources(program, hw.hbm_bandwidth > 0)
        self._grids = {}
        self._grid_keys = {}
        self._env = env  # gather ids of preloaded inputs are read from the call's tensors
        order = instructions if stream else [Instruction(EXECUTE, 0, i) for i in range(len(ops))]
        sram.ideal = stream and separate_preload_sram(program.preload_schedule.design)
        sram.start_region(np.zeros(hw.num_cores, np.int64) if resting is None else resting)
        resident_names = {d.name for d in program.inputs if d.source == RESIDENT}
        leaving = set(program.leaving_tensors)  # what the host reads back from the cores
        rest_after: dict[str, np.ndarray] = {}
        preload_space: dict[str, np.ndarray] = {}
        hbm_reads: list[dict[str, float]] = []  # per operator that read HBM
        # load-compute-store operators (T10 §2.2) keep every tensor in a VGM region, reserved
        # on every core for the whole region
        vgm = VgmRegion(program, hw) if any(isinstance(op.plan, VgmPlan) for op in ops) else None
        if vgm is not None:
            sram.used += vgm.bytes_per_core
        try:
            for ins in order:
                i, op = ins.op, ops[ins.op]
                if ins.kind == PRELOAD:
                    self._preload_op(i, op, layouts[i], offchip[i], preloaded)
                    continue
                # tensors this op reads for the last time move into its partitions
                for name in released(last_use, sram.resident, i):
                    sram.release(name)
                if vgm is not None and isinstance(op.plan, VgmPlan):
                    env[op.output_name], vgm_stats = vgm.run_op(op, env, produced, sram.used)
                    op_stats[i] = vgm_stats.to_dict()
                    produced.add(op.output_name)
                    continue
                layout = layouts[i] if i in layouts else checked_layout(op, hw)
                space = self._preloads[op.name].info.space_bytes_per_core if i in preloaded else 0
                op_stats[i] = self._execute_op(op, layout, env, produced,
                                               offchip[i] if i in preloaded else [], sources[i],
                                               resident_names, stream)
                reads = op_reads(layout, op.input_names, sources[i])
                if reads:  # what HBM served it: a lookup's rows, not its table
                    op_stats[i]["hbm_bytes"] = count_value(sum(reads.values()))
                    hbm_reads.append(reads)
                if i in preloaded:
                    op_stats[i]["preloaded_bytes"] = preloaded[i]
                    op_stats[i]["preload_bytes_per_core"] = space
                    preload_space[op.name] = np.zeros(hw.num_cores, np.int64)
                    preload_space[op.name][layout.physical] = space
                op_stats[i].update(self._op_actions(op, layout, op_stats[i],
                                                    op.output_name in leaving))
                if outlives(last_use, op.output_name, i):
                    out = len(op.expr.tensors) - 1
                    sram.hold(op.output_name, layout.physical[layout.owners()], layout.partition_bytes(out))
                # what it leaves until the next one starts (the stream's SRAM peaks)
                rest_after[op.name] = sram.used + hw.shift_buffer_bytes
        finally:  # leave the chip as this region found it, even after an error
            for name in {op.name for op in ops} & set(cores.allocated()):
                cores.free(name)
            self._preloads.drop_all()
            sram.release_all()
            if vgm is not None:
                sram.used -= vgm.bytes_per_core
            self._preloads.hbm = {}
            self._env = {}
            self._grids = {}
            self._grid_keys = {}
            sram.ideal = False
            region_sram = RegionSram(sram.peak_need, sram.op_need, sram.peak_preload,
                                     rest_after=rest_after, preload_space=preload_space)
            sram.start_region(np.zeros(hw.num_cores, np.int64))
        op_stats = [s for s in op_stats if s is not None]
        # VGM operators' peaks are whole (the VGM region is on every core)
        region_sram.vgm_peak = max((s["sram_bytes_per_core"] for s in op_stats
                                    if s.get("execution") == "vgm"),
                                   default=0)
        return {
            "region": program.region,
            "ops": op_stats,
            "cores_used": max((s["cores"] for s in op_stats), default=0),
            "steps": sum(s["steps"] for s in op_stats),
            "rotation_bytes": sum(s["rotation_bytes"] for s in op_stats),
            "reduction_bytes": sum(s["reduction_bytes"] for s in op_stats),
            "shift_bytes": sum(s["shift_bytes"] for s in op_stats),
            "relayout_bytes": sum(s["relayout_bytes"] for s in op_stats),
            "hbm_bytes": count_value(run_hbm_bytes([call_reads(hbm_reads)])),
            "host_placed_bytes": sum(s["host_placed_bytes"] for s in op_stats),
            "fetch_bytes": sum(s.get("fetch_bytes", 0) for s in op_stats),
            "store_bytes": sum(s.get("store_bytes", 0) for s in op_stats),
            "preloaded_bytes": sum(s.get("preloaded_bytes", 0) for s in op_stats),
            "distributed_bytes": sum(s.get("distributed_bytes", 0) for s in op_stats),
            "preloads": sum(1 for ins in order if ins.kind == PRELOAD) if stream else 0,
            "executes": len(ops) if stream else 0,
            # the run's statistics complete it with the whole run's resident state
            "peak_sram_bytes_per_core": 0,
            "peak_preload_bytes_per_core": region_sram.peak_preload,
            "sram_bytes_per_core_budget": hw.sram_bytes_per_core,
            # the actions that cost energy (schedules.actions), summed over the operators
            **{k: count_value(sum(s.get(k, 0) for s in op_stats)) for k in ACTION_METRICS},
        }, region_sram

    def _op_actions(self, op: OpProgram, layout: OpLayout, stats: dict[str, Any],
                    returns: bool) -> dict[str, float]:
        """The actions of an executed operator that cost energy, by the one rule both
        executors count with (:mod:`schedules.actions`): what its steps, epilogue and
        reduction adds computed and read and wrote, and its transfers: the bytes it moved
        between cores (re-layouts, rotations, reductions, distribution), the bytes its loads
        wrote into its cores (``preloaded_bytes``) and, when the host reads its output
        (``returns``), the output partitions its owners send back."""
        hw = self._cores.hw
        out = len(op.expr.tensors) - 1
        returned = layout.owners().size * layout.partition_bytes(out) if returns else 0
        moved = (stats["relayout_bytes"] + stats["rotation_bytes"] + stats["reduction_bytes"]
                 + stats.get("distributed_bytes", 0))
        link_hops = stats["link_byte_hops"] + (self._link_hops().host_return(layout)
                                               if returns else 0.0)
        counts = op_actions(layout, hw) + transfer_actions(
            moved_bytes=moved, delivered_bytes=stats.get("preloaded_bytes", 0),
            returned_bytes=returned, link_byte_hops=link_hops)
        return {k: count_value(v) for k, v in action_metrics(counts).items()}

    def _preload_op(self, index: int, op: OpProgram, layout: OpLayout, inputs: Sequence[int],
                    preloaded: dict[int, int]) -> None:
        """``preload_async`` of one operator of the current call from the HBM store."""
        hbm = {}
        for t in inputs:
            name = op.input_names[t]
            if name not in self._preloads.hbm:
                raise DeviceProgramError(f"operator '{short_name(op.name)}' preloads "
                                         f"'{short_name(name)}', which is not in HBM")
            hbm[t] = self._preloads.hbm[name]
        ids = {}
        for t in inputs:
            gather = op.expr.inputs[t].gather
            if gather is not None:
                ids_name = op.input_names[gather.ids]
                if ids_name not in self._env:
                    raise DeviceProgramError(f"operator '{short_name(op.name)}' preloads gathered "
                                             f"'{short_name(op.input_names[t])}', but its ids "
                                             f"'{short_name(ids_name)}' are not known before it runs")
                ids[gather.ids] = self._env[ids_name]
        preloaded[index] = self._cores.preload_async(op.name, layout, hbm,
                                                     {t: op.chunks_of(t) for t in inputs}, ids)

    def _execute_op(self, op: OpProgram, layout: OpLayout, env: dict[str, np.ndarray],
                    produced: set[str], distributed: Sequence[int],
                    sources: Sequence[str] = (), resident: set[str] | frozenset[str] = frozenset(),
                    stream: bool = False) -> dict[str, Any]:
        """``execute`` of one compute-shift operator: allocate; distribute its preloaded
        inputs (``distributed``, when it was preloaded) and place the others; compute.

        Its on-chip inputs (``sources``: produced in the region, another region's result, or
        ``resident`` model state) are re-laid out from where they wait: the bytes its cores
        receive from other cores are ``relayout_bytes``, counted by the contract's one rule
        (:mod:`runtime_sim.contract.resting`), as the timing simulator prices them. Without a
        preload stream, its off-chip inputs (host, HBM) are loaded: ``preloaded_bytes`` are
        the bytes delivered to its cores (each core's box of real data, replicas included).

        A gathered input (an embedding lookup) is placed from the rows its ids pick; when the
        table is on chip, ``relayout_bytes`` counts the rows moved under uniformly random ids
        (the program's expectation, which the timing simulator computes too), and the rows
        each core receives from the cores holding them are counted exactly from the call's
        ids (:func:`~runtime_sim.contract.relayout.gather_relayout`): ``gather_bytes`` moved
        between cores, ``gather_local_bytes`` already in place."""
        cores = self._cores
        hw = cores.hw
        cores.allocate(op.name, layout, in_place_bytes(op, layout, resident))
        moved = cores.distribute(op.name) if op.name in self._preloads else 0
        relayout = 0.0
        host = loaded = 0
        hops = self._link_hops()
        relayout_hops = 0.0
        by_kind: dict[str, list[int]] = {"hbm": [], "host": []}  # loaded inputs per source
        gather_moved = gather_local = 0.0
        chips = np.arange(hw.num_cores) // hw.cores_per_chip
        for t, name in enumerate(op.input_names):
            if name not in env:
                raise DeviceProgramError(f"operator '{short_name(op.name)}' reads unknown "
                                         f"tensor '{short_name(name)}'")
            access = op.expr.inputs[t]
            if str(env[name].dtype) != access.dtype:
                raise DeviceProgramError(
                    f"operator '{short_name(op.name)}' reads '{short_name(name)}' as "
                    f"{access.dtype}, it is {env[name].dtype}"
                )
            if t in distributed:
                continue
            source = sources[t] if t < len(sources) else "host"
            gather = access.gather
            ids = env.get(op.input_names[gather.ids]) if gather is not None else None
            written = cores.place(op.name, t, env[name], ids)
            if name not in produced:
                host += written
            if source in OFFCHIP_SOURCES and not stream:
                loaded += int(input_boxes(layout, t).nbytes.sum())
                by_kind[source].append(t)
            origin = relayout_origin(op, t, source, name in resident)
            grid = self._origin_grid(op, t, origin)
            if grid is None:
                continue
            relayout += input_relayout(grid, layout, t, chips, hw.num_chips).moved_bytes
            relayout_hops += hops.relayout(grid, layout, t, self._grid_key(op, t, origin))
            if gather is not None:
                rows = gather_rows(ids, access.shape[gather.axis], gather.mode)
                rl = input_relayout(grid, layout, t, chips, hw.num_chips, rows)
                gather_moved += rl.moved_bytes
                gather_local += rl.local_bytes
        shift_hops = [0.0]

        def on_shift(event: ShiftEvent) -> None:
            shift_hops[0] += hops.shift(layout, event)

        cores.run_steps(op.name, on_shift)
        cores.reduce_outputs(op.name)
        result = cores.read_output(op.name)
        # the link byte-hops of its transfers, in the order the timing simulator sums them
        # (distribution, re-layouts, shifts, reduction, loads by source)
        distribute = 0.0
        if distributed:
            for t in distributed:
                by_kind[sources[t] if t < len(sources) else "host"].append(t)
            if not self._sram.ideal:  # the ideal design distributes on its own network
                distribute = hops.distribution(layout, tuple((t, op.chunks_of(t))
                                                             for t in sorted(distributed)))
        loads = [hops.preload(kind, layout, ts, [op.chunks_of(t) for t in ts]) if distributed
                 else hops.load(kind, layout, ts)
                 for kind, ts in ((k, sorted(v)) for k, v in by_kind.items()) if ts]
        link_hops = sum([distribute, relayout_hops, shift_hops[0], hops.reduction(layout), *loads])
        alloc = cores.allocation(op.name)
        stats = {
            "op": op.name,
            "kind": op.expr.kind,
            "cores": layout.num_cores,
            "steps": alloc.steps,
            "rotation_bytes": alloc.shift_bytes,
            "reduction_bytes": alloc.reduction_bytes,
            "shift_bytes": alloc.shift_bytes + alloc.reduction_bytes,
            "relayout_bytes": relayout,
            "host_placed_bytes": host,
            "sram_bytes_per_core": alloc.sram_peak,
            "link_byte_hops": link_hops,  # its returns to the host added by _op_actions
        }
        if distributed:
            stats["distributed_bytes"] = moved
        if loaded:
            stats["preloaded_bytes"] = loaded
        if any(a.gather is not None for a in op.expr.inputs):
            stats["gather_bytes"] = gather_moved
            stats["gather_local_bytes"] = gather_local
        self._grids[op.output_name] = producer_grid(layout)
        self._grid_keys[op.output_name] = cost_key(op.expr, op.plan)
        cores.free(op.name)
        env[op.output_name] = result
        produced.add(op.output_name)
        return stats

    def _link_hops(self) -> LinkHops:
        """The byte-hop counter of the current chip's network (:mod:`runtime_sim.functional.link_hops`)."""
        return self._cores.link_hops

    def _grid_key(self, op: OpProgram, t: int, origin: str) -> tuple:
        """What the grid input ``t`` of ``op`` waits in depends on (see :meth:`_origin_grid`):
        its producer's expression and plan, its shape and dtype, or its idle placement."""
        if origin == FROM_PRODUCER:
            return (origin, self._grid_keys[op.input_names[t]])
        access = op.expr.inputs[t]
        if origin == FROM_IDLE:
            resting = idle_op(op)
            return (origin, cost_key(resting.expr, resting.plan) if resting is not None else "",
                    access.tensor_shape, access.dtype, t)
        return (origin, access.tensor_shape, access.dtype)

    def _origin_grid(self, op: OpProgram, t: int, origin: str | None) -> BlockGrid | None:
        """Where input ``t`` of ``op`` waits on the cores before it runs, as blocks
        (:func:`runtime_sim.contract.resting.relayout_origin`; ``None``: nothing moves between
        cores): its producer's output blocks, near-even blocks over the chip for another
        region's result, or its idle placement for resident model state."""
        hw = self._cores.hw
        access = op.expr.inputs[t]
        if origin == FROM_PRODUCER:
            return self._grids[op.input_names[t]]
        if origin == FROM_CHIP:
            return canonical_grid(access.tensor_shape, dtype_bytes(access.dtype), hw.num_cores)
        if origin == FROM_IDLE:
            resting = idle_op(op)
            idle = checked_layout(resting, hw) if resting is not None else None
            return resident_grid(idle, access, t, hw.num_cores)
        return None
