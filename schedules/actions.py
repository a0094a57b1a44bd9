"""The actions of an operator that cost energy, counted one way for both executors.

The energy of a run (:mod:`runtime_sim.contract.energy`) is per-action energies times the
actions the run performs (:class:`~runtime_sim.contract.energy.ActionCounts`). Both executors
count them with the two rules of this module, so that the functional device and the timing
simulator give one value of every count (the metrics ``matrix_flops``, ``vector_flops``,
``sram_read_bytes``, ``sram_write_bytes``, source "both" in :mod:`runtime_sim.contract.metrics`):

:func:`op_actions`, what an operator's cores compute (T10 §4.2: ``steps`` homogeneous
compute-shift steps on every core of the plan):

* every core runs the sub-task of every step, over the plan's chunk (``OpLayout.rp``: the
  padded sub-task the timing simulator charges, replicas included): its FLOPs
  (:meth:`ComputeTemplate.flops <schedules.base.ComputeTemplate.flops>`) run on the unit of
  its template (``unit``: the matrix unit for sums of products, the vector unit otherwise; the
  unit :func:`runtime_sim.timing.floors.peak_seconds` times them on), matrix FLOPs by their
  operands' dtype (:func:`schedules.base.compute_dtype`);
* vector work a matrix sub-task does beside its products (fused attention's online softmax);
* the fused epilogue, on every output owner (ring 0), over its output partition: vector FLOPs;
* the adds of the replica reduction (one per output element a replica sends, as
  :func:`runtime_sim.machine.links.replica_reduction_schedule` times them) and of the combine
  of split core-local reductions (one per statistic gathered towards a group's first core,
  every step): vector FLOPs.

The SRAM rule: a sub-task reads each input's chunk of the step (epilogue-only inputs
excepted) from its core's SRAM and writes its result chunk (the chunk of the output it
accumulates into) once per step: the units' registers and accumulators hold a step's operands
and partial sums, the SRAM holds everything between steps (T10 §4.2: a core's sub-task reads
its operand partitions from and accumulates into its local memory). An epilogue reads its
output partition and its epilogue inputs' partitions once and writes its output partition
once. :func:`transfer_actions` adds the transfers: a byte moved between cores (shift, replica
reduction, re-layout, distribution) is read from the sender's SRAM and written into the
receiver's (the exchange and the mesh routers do not buffer a transfer in SRAM); a byte
loaded from HBM or the host is written once into every core that receives it; a byte returned
to the host is read once from the core that holds it. Reduction adds happen as the data
arrives: their operands are the received bytes (already written) and the partial sum the
sub-task's result write counted.

A load-compute-store (VGM) operator (T10 §2.2) follows the same rules over its tiles
(:func:`vgm_actions`): every tile runs one sub-task per reduction chunk at the plan's tile
extents, its epilogue once; every byte a tile fetches from a home slice or stores home is read
from one core's SRAM and written into another's, and crosses the all-to-all exchange once.

A fused attention operator's sub-task is both: its two products on the matrix unit, its online
softmax on the vector unit (:meth:`ComputeTemplate.step_vector_flops
<schedules.base.ComputeTemplate.step_vector_flops>`, the operations its step cycles charge).
Not counted: the index arithmetic of gathers.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.contract.energy import ActionCounts
from runtime_sim.contract.expr import TensorExpr, dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.vgm_layout import VgmLayout
from schedules import template_for
from schedules.base import compute_dtype

__all__ = ["ACTION_METRICS", "action_metrics", "chunk_bytes", "op_actions", "transfer_actions",
           "vgm_actions"]

#: The counts both executors report, under the metric names of the glossary
#: (:mod:`runtime_sim.contract.metrics`). ``ActionCounts``' ``hbm_bytes``, ``inter_chip_bytes``
#: and ``host_bytes`` are the energy model's (HBM reads a copy per chip, every phase's chip
#: crossings, both host directions), not the reports' metrics of those names.
ACTION_METRICS = ("matrix_flops", "vector_flops", "sram_read_bytes", "sram_write_bytes",
                  "link_byte_hops")


def action_metrics(actions: ActionCounts) -> dict[str, float]:
    """The :data:`ACTION_METRICS` of ``actions`` (``matrix_flops`` summed over dtypes)."""
    counts = actions.to_dict()
    return {k: counts[k] for k in ACTION_METRICS}


def chunk_bytes(layout: OpLayout, t: int) -> int:
    """Bytes of tensor ``t`` one sub-task touches on one core in one step: its chunk at the
    plan's rotating pace (``rp``) along each index, a compound index (a convolution's
    ``h + kh``) spanning its window, a split core-local axis its per-core length."""
    access = layout.expr.tensors[t]
    n = 1
    for d, idx in enumerate(access.indices):
        if any(a in layout.local_extent for a in idx.axes):
            if idx.is_simple and idx.terms[0][0] in layout.local_follow:
                n *= layout.local_extent[idx.terms[0][0]]
            else:
                n *= layout.expr.access_shape(t)[d]
        elif not idx.terms:
            continue
        elif idx.is_simple:
            n *= layout.rp[idx.terms[0][0]]
        else:
            n *= sum(abs(c) * (layout.rp[a] - 1) for a, c in idx.terms) + 1
    return n * dtype_bytes(access.dtype)


def op_actions(layout: OpLayout, hw: HardwareSpec) -> ActionCounts:
    """What the cores of ``layout`` compute and read and write of their SRAM while they run
    its steps, its epilogue and its reduction adds (the module docstring's rules; transfers
    are :func:`transfer_actions`).

    Parameters
    ----------
    layout
        The operator under its plan.
    hw
        The chip (its vector rate converts the template's epilogue cycles to operations).

    Returns
    -------
    ActionCounts
        Matrix FLOPs (by compute dtype), vector FLOPs, SRAM bytes read and written.
    """
    expr = layout.expr
    template = template_for(expr.kind)
    cores, steps = layout.num_cores, layout.steps
    runs = cores * steps  # sub-tasks run (every core, every step)
    sub = float(template.flops(expr, layout.rp)) * runs
    out = len(expr.tensors) - 1
    main = [t for t in range(out) if t not in expr.epilogue_inputs]
    reads = sum(chunk_bytes(layout, t) for t in main) * runs
    writes = chunk_bytes(layout, out) * runs
    owners = int(layout.owners().size)
    out_partition = {a: layout.xp[a] // layout.plan.ft(out, a) for a in layout.axes}
    # the template's epilogue cycles at the vector rate are its operations (one per cycle
    # per lane, schedules.base.ComputeTemplate.epilogue_cycles)
    epilogue = round(template.epilogue_cycles(expr, out_partition, hw) * hw.vector_flops_per_cycle) * owners
    if epilogue:  # it reads its output partition and epilogue inputs, writes the output
        reads += (layout.partition_bytes(out)
                  + sum(layout.partition_bytes(t) for t in expr.epilogue_inputs)) * owners
        writes += layout.partition_bytes(out) * owners
    adds = 0
    R = layout.replicas(out)
    if R > 1:
        adds += (cores - cores // R) * (layout.replica_bytes() // dtype_bytes(expr.output.dtype))
    G = layout.combine_size
    if G > 1:
        adds += steps * (cores // G) * (G - 1) * sum(layout.combine_levels())
    matrix = _unit_counts(template, expr, sub)
    beside = float(template.step_vector_flops(expr, layout.rp)) * runs  # attention's softmax
    vector = epilogue + adds + beside + (0.0 if matrix else sub)
    return ActionCounts.of(matrix, vector_flops=float(vector), sram_read_bytes=float(reads),
                           sram_write_bytes=float(writes))


def _unit_counts(template: object, expr: TensorExpr, flops: float) -> dict[str | None, float]:
    """Matrix FLOPs by dtype when the template runs on the matrix unit, else none (the caller
    adds ``flops`` to the vector FLOPs)."""
    return {compute_dtype(expr): flops} if getattr(template, "unit", "vector") == "matrix" else {}


def vgm_actions(layout: VgmLayout, hw: HardwareSpec, moved_bytes: float) -> ActionCounts:
    """The actions of a load-compute-store operator (the module docstring's VGM rule):
    ``moved_bytes`` the tile bytes it fetched from and stored to home slices
    (``VgmTiming.bytes_moved``, the functional device's ``fetch_bytes + store_bytes``)."""
    expr = layout.expr
    template = template_for(expr.kind)
    subtasks = layout.num_tiles * layout.num_chunks
    flops = float(template.flops(expr, layout.tile)) * subtasks
    out = len(expr.tensors) - 1
    main = [t for t in range(out) if t not in expr.epilogue_inputs]
    reads = sum(_tile_bytes(layout, t) for t in main) * subtasks
    writes = _tile_bytes(layout, out) * subtasks
    partition = {a: layout.tile[a] for a in layout.spatial}
    epilogue = round(template.epilogue_cycles(expr, partition, hw) * hw.vector_flops_per_cycle) * layout.num_tiles
    if epilogue:  # on the output tile: read, then written home (the store is in moved_bytes)
        reads += _tile_bytes(layout, out) * layout.num_tiles
    matrix = _unit_counts(template, expr, flops)
    beside = float(template.step_vector_flops(expr, layout.tile)) * subtasks
    vector = float(epilogue) + beside + (0.0 if matrix else flops)
    return ActionCounts.of(matrix, vector_flops=vector, sram_read_bytes=float(reads + moved_bytes),
                           sram_write_bytes=float(writes + moved_bytes),
                           link_byte_hops=float(moved_bytes))


def _tile_bytes(layout: VgmLayout, t: int) -> int:
    """Bytes of tensor ``t`` one VGM sub-task touches: its box at the tile extents (a
    compound index spanning its window, a core-local axis whole)."""
    access = layout.expr.tensors[t]
    n = 1
    for d, idx in enumerate(access.indices):
        if any(a in layout.local_extent for a in idx.axes):
            n *= layout.expr.access_shape(t)[d]
        elif idx.terms:
            n *= sum(abs(c) * (layout.tile[a] - 1) for a, c in idx.terms) + 1
    return n * dtype_bytes(access.dtype)


def transfer_actions(*, moved_bytes: float = 0.0, delivered_bytes: float = 0.0,
                     returned_bytes: float = 0.0, link_byte_hops: float = 0.0,
                     inter_chip_bytes: float = 0.0, hbm_bytes: float = 0.0,
                     host_bytes: float = 0.0) -> ActionCounts:
    """The actions of an operator's transfers, by the SRAM rule of the module docstring.

    Parameters
    ----------
    moved_bytes
        Bytes moved between cores (received: shifts, replica reduction, re-layouts,
        distribution): each read from the sender's SRAM and written into the receiver's.
    delivered_bytes
        Bytes loaded into cores from HBM or the host (summed over receiving cores): written.
    returned_bytes
        Bytes the cores send back to the host: read.
    link_byte_hops, inter_chip_bytes, hbm_bytes, host_bytes
        The network's, the chip fabric's, HBM's and the host links' counts, as they are.
    """
    return ActionCounts.of(sram_read_bytes=moved_bytes + returned_bytes,
                           sram_write_bytes=moved_bytes + delivered_bytes,
                           link_byte_hops=link_byte_hops, inter_chip_bytes=inter_chip_bytes,
                           hbm_bytes=hbm_bytes, host_bytes=host_bytes)
