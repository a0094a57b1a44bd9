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
* the fused epilogue, on every output owner (ring 0), over its output partition: vector FLOPs;
* the adds of the replica reduction (one per output element a replica sends, as
  :func:`runtime_sim.machine.links.replica_reduction_schedule` times them) and of the combine
  of split core-local reductions (one per statistic gathered towards a group's first core,
  every step): vector FLOPs.

The SRAM rule: a sub-task reads each input's chunk of the step from its core's SRAM and
writes its result chunk (the chunk of the output it accumulates into) once per step: the
units' registers and accumulators hold a step's operands and partial sums, the SRAM holds
everything between steps (T10 §4.2; Graphcore's IPU tiles and T10's model read operands from
and write results to the core's local SRAM once per vertex). An epilogue reads and writes its
output partition once. :func:`transfer_actions` adds the transfers: a byte moved between
cores (shift, replica reduction, re-layout, distribution) is read from the sender's SRAM and
written into the receiver's (the exchange and the mesh routers do not buffer a transfer in
SRAM); a byte loaded from HBM or the host is written once into every core that receives it;
a byte returned to the host is read once from the core that holds it. Reduction adds happen as
the data arrives: their operands are the received bytes (already written) and the partial sum
the sub-task's result write counted.

Not counted: an attention operator's online-softmax vector work inside its steps (its matrix
FLOPs are the two products), and the index arithmetic of gathers.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.contract.energy import ActionCounts
from runtime_sim.contract.expr import dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from schedules import template_for
from schedules.base import compute_dtype

__all__ = ["ACTION_METRICS", "action_metrics", "chunk_bytes", "op_actions", "transfer_actions"]

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
    reads = sum(chunk_bytes(layout, t) for t in range(out)) * runs
    writes = chunk_bytes(layout, out) * runs
    owners = int(layout.owners().size)
    out_partition = {a: layout.xp[a] // layout.plan.ft(out, a) for a in layout.axes}
    # the template's epilogue cycles at the vector rate are its operations (one per cycle
    # per lane, schedules.base.ComputeTemplate.epilogue_cycles)
    epilogue = round(template.epilogue_cycles(expr, out_partition, hw) * hw.vector_flops_per_cycle) * owners
    if epilogue:
        reads += layout.partition_bytes(out) * owners
        writes += layout.partition_bytes(out) * owners
    adds = 0
    R = layout.replicas(out)
    if R > 1:
        adds += (cores - cores // R) * (layout.replica_bytes() // dtype_bytes(expr.output.dtype))
    G = layout.combine_size
    if G > 1:
        adds += steps * (cores // G) * (G - 1) * sum(layout.combine_levels())
    vector = epilogue + adds
    matrix: dict[str | None, float] = {}
    if getattr(template, "unit", "vector") == "matrix":
        matrix[compute_dtype(expr)] = sub
    else:
        vector += sub
    return ActionCounts.of(matrix, vector_flops=float(vector), sram_read_bytes=float(reads),
                           sram_write_bytes=float(writes))


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
