"""Where an operator's inputs wait before it runs, and what model state holds all run long.

The one accounting of on-chip data movement and resting SRAM that both executors use: the
functional device (:mod:`runtime_sim.functional`) counts with it the data it moves, the timing
simulator (:mod:`runtime_sim.timing.work`) prices with it the same bytes, so that
``relayout_bytes`` and ``peak_sram_bytes_per_core`` (:mod:`runtime_sim.contract.metrics`) have
one value for one program.

Re-layout (T10 §4.3.2, §5 "the program may rearrange the data on cores"): before an operator
runs, each of its on-chip inputs moves from where it waits into the boxes its plan needs
(:func:`runtime_sim.contract.relayout.input_relayout`); the bytes a core receives from other
cores count, what it already holds does not (:attr:`~runtime_sim.contract.relayout.Relayout.
moved_bytes`). Where an input waits depends on its source
(:func:`runtime_sim.contract.stream.input_sources`, :func:`relayout_origin`):

* produced earlier in the region: its producer's output blocks on ring 0
  (:func:`~runtime_sim.contract.relayout.producer_grid`);
* ``"chip"`` (another region's result): near-square blocks over every core
  (:func:`~runtime_sim.contract.relayout.canonical_grid`), an estimate, since the producing
  region's layout is not part of this program;
* ``"resident"`` (model state kept on chip, T10 §4.3.2): its idle placement
  (:func:`resident_grid`), unless the operator idles in its active plan (then nothing moves);
* ``"host"``, ``"hbm"`` and resident constants: nothing moves between cores (an off-chip
  load, or a constant kept in its operator's placement).

A gathered input (an embedding lookup) moves the rows its ids pick: both executors count the
expectation under uniformly random ids (ids are data, which the timing simulator does not
have); the functional device reports the exact rows of the call besides (``gather_bytes``).

Resting SRAM: every ``"resident"`` region input of a run occupies SRAM in its idle placement
for the whole run (:func:`resident_state`); an operator idling in its active plan does not
allocate those inputs a second time (:func:`in_place_bytes`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

import numpy as np

from runtime_sim.contract.expr import TensorAccess, dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout, checked_layout
from runtime_sim.contract.plan import IDLE_SPREAD
from runtime_sim.contract.program import PRELOAD, DeviceProgram, OpProgram
from runtime_sim.contract.relayout import BlockGrid, canonical_grid, placement_grid, rests_spread
from runtime_sim.contract.sram_budget import check_sram
from runtime_sim.contract.stream import PRODUCED

__all__ = [
    "FROM_CHIP",
    "FROM_IDLE",
    "FROM_PRODUCER",
    "RESIDENT",
    "grid_bytes",
    "idle_bytes",
    "idle_op",
    "in_place_bytes",
    "relayout_origin",
    "resident_grid",
    "resident_state",
    "stream_sram_peaks",
]

#: Source of model state kept on chip between runs (``TensorDecl.source``).
RESIDENT = "resident"
#: Where an input is re-laid out from (:func:`relayout_origin`).
FROM_PRODUCER = "producer"
FROM_CHIP = "chip"
FROM_IDLE = "idle"


def relayout_origin(op: OpProgram, t: int, source: str, resident_input: bool) -> str | None:
    """Where input ``t`` of ``op`` is re-laid out from before ``op`` runs, by its ``source``
    (:func:`runtime_sim.contract.stream.input_sources`): :data:`FROM_PRODUCER`,
    :data:`FROM_CHIP`, :data:`FROM_IDLE` (``resident_input``: a ``"resident"`` region input,
    not a constant), or ``None`` when nothing moves between cores (see the module docstring)."""
    if source == PRODUCED:
        return FROM_PRODUCER
    if source == "chip":
        return FROM_CHIP
    if source == RESIDENT and resident_input:
        if op.idle_plan is None and not rests_spread(op.expr, t):
            return None  # it idles in this very placement
        return FROM_IDLE
    return None


def idle_op(op: OpProgram) -> OpProgram | None:
    """``op`` under the plan its resident inputs rest in between runs (T10 §4.3.2): itself
    when it idles in its active plan (``idle_plan is None``), ``None`` for
    :data:`~runtime_sim.contract.plan.IDLE_SPREAD` (near-even blocks over every core)."""
    if op.idle_plan == IDLE_SPREAD:
        return None
    if op.idle_plan is None:
        return op
    return dataclasses.replace(op, plan=op.idle_plan, idle_plan=None)


def resident_grid(idle: OpLayout | None, access: TensorAccess, t: int, num_cores: int) -> BlockGrid:
    """Where resident input ``t`` (``access``) rests, as blocks on cores: its partitions in
    the idle layout ``idle`` (:func:`~runtime_sim.contract.relayout.placement_grid`), or, spread
    (``idle`` is ``None``) or not block-aligned, near-even blocks over every core."""
    grid = placement_grid(idle, t) if idle is not None else None
    if grid is None:
        grid = canonical_grid(access.tensor_shape, dtype_bytes(access.dtype), num_cores)
    return grid


def grid_bytes(grid: BlockGrid, num_cores: int) -> np.ndarray:
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


def idle_bytes(op: OpProgram, t: int, idle: OpLayout | None, num_cores: int,
               grid: BlockGrid | None = None) -> np.ndarray:
    """Bytes per core resident input ``t`` of ``op`` occupies while idle: one partition on
    every core of its idle layout ``idle`` (replicas included), or, spread (a gathered table
    or ``idle`` ``None``), its blocks (``grid``: :func:`resident_grid`, when the caller has it)."""
    if idle is None or rests_spread(op.expr, t):
        if grid is None:
            grid = resident_grid(idle, op.expr.inputs[t], t, num_cores)
        return grid_bytes(grid, num_cores)
    held = np.zeros(num_cores, np.int64)
    held[idle.physical] = idle.partition_bytes(t)
    return held


def resident_state(programs: Sequence[DeviceProgram], hw: HardwareSpec,
                   bytes_of: Callable[[OpProgram, int], np.ndarray] | None = None) -> np.ndarray:
    """Bytes per core that the ``"resident"`` inputs of a run occupy all run long: each in
    the idle placement of the first operator of its region that reads it (T10 §4.3.2),
    summed over the run's region calls.

    ``bytes_of(op, t)`` gives :func:`idle_bytes` of input ``t`` of ``op`` (a caller's cached
    version); by default it is computed from :func:`idle_op` and
    :func:`~runtime_sim.contract.layout.checked_layout`."""
    if bytes_of is None:
        def bytes_of(op: OpProgram, t: int) -> np.ndarray:
            resting = idle_op(op)
            layout = checked_layout(resting, hw) if resting is not None else None
            return idle_bytes(op, t, layout, hw.num_cores)
    total = np.zeros(hw.num_cores, np.int64)
    per_program: dict[tuple, np.ndarray] = {}
    for program in programs:
        names = tuple(d.name for d in program.inputs if d.source == RESIDENT)
        if not names:
            continue
        key = (id(program.ops), names)
        held = per_program.get(key)
        if held is None:
            held = np.zeros(hw.num_cores, np.int64)
            seen: set[str] = set()
            for op in program.ops:
                for t, name in enumerate(op.input_names):
                    if name in names and name not in seen:
                        seen.add(name)
                        held += bytes_of(op, t)
            per_program[key] = held
        total += held
    return total


def in_place_bytes(op: OpProgram, layout: OpLayout, resident: set[str] | frozenset[str]) -> int:
    """Bytes per core (on every core of ``layout``) of ``op``'s partitions that are already
    counted in :func:`resident_state`: its ``resident`` inputs when it idles in its active
    plan (gathered tables excepted, which rest spread)."""
    if op.idle_plan is not None:
        return 0
    return sum(layout.partition_bytes(t) for t, name in enumerate(op.input_names)
               if name in resident and not rests_spread(op.expr, t))


def stream_sram_peaks(stream: Sequence[tuple[str, int]], executing: Sequence[np.ndarray],
                      resting: Sequence[np.ndarray], preload_space: Mapping[int, np.ndarray],
                      base: np.ndarray, ideal: bool = False, *, hw: HardwareSpec | None = None,
                      ops: Sequence[OpProgram] = ()) -> tuple[int, int]:
    """Peak SRAM and peak preload space per core of a preload stream run (Elk §4.5), in the
    memory model the Elk pass budgets with (Elk §4.2, Fig. 10: while an operator executes, a
    core holds its execution space plus the preload space of every operator preloaded before
    it in the stream and not yet executed).

    A preload's space is held from its issue in the stream until its operator's execute
    starts, where it becomes part of that operator's execution space; the time a preload
    waits in the HBM queue does not free it (the compiler reserved it). Both executors report
    these peaks, the functional device from the needs it recorded, the timing simulator from
    its work items.

    Parameters
    ----------
    stream : sequence of (kind, operator)
        The run's instructions in issue order (:func:`runtime_sim.contract.stream.run_stream`),
        operators numbered over the run (call offsets added).
    executing : sequence of array
        Per operator, SRAM per core while it executes, its own preload space included and
        other operators' excluded (partitions, live activations, resident state, shift buffer).
    resting : sequence of array
        Per operator, SRAM per core once it ended and before the next one starts.
    preload_space : mapping
        Operator -> preload space per core of its preloaded inputs.
    base : array
        SRAM per core before the first operator (resident state, shift buffer).
    ideal : bool
        Design ``"ideal"`` (Elk §6.1): preloading has its own SRAM; the peak SRAM is then the
        execution side alone.
    hw, ops : optional
        The chip and the run's operators (numbered as in ``stream``): every instruction is then
        checked against the SRAM rule (:func:`runtime_sim.contract.sram_budget.check_sram`),
        raising :class:`~runtime_sim.contract.errors.SramOverflowError` at the first one that
        overflows, as the functional device does at that instruction.
    """
    pending = np.zeros_like(base)
    peak = int(base.max()) if base.size else 0
    peak_preload = 0
    held = base
    for kind, op in stream:
        space = preload_space.get(op)
        if kind == PRELOAD:
            if space is not None:
                pending = pending + space
        else:
            if space is not None:
                pending = pending - space  # now part of its execution space
            held = executing[op]
        if hw is not None:
            check_sram(ops[op].name, hw, held, pending, separate=ideal,
                       label=ops[op].label or ops[op].expr.kind, tensors=ops[op].expr.tensor_summary())
        need = held if ideal else held + pending
        peak = max(peak, int(need.max()) if need.size else 0)
        peak_preload = max(peak_preload, int(pending.max()) if pending.size else 0)
        if kind != PRELOAD:
            held = resting[op]
    return peak, peak_preload
