"""Time of one operator's compute-shift steps, shifts and replica reduction.

An operator under a T10 plan runs ``S`` homogeneous steps (T10 §4.2, §5: "All Vertices
executed in the same step are homogeneous ... After a shift, all cores can execute the same
ComputeSet"), bulk-synchronously: compute, synchronize, exchange. So:

* compute per step = the op template's ``subtask_cycles(expr, rp, hw)`` (shared with the
  compiler, :mod:`schedules`) plus ``hw.sync_cycles`` (118 cycles per step in the Elk
  artifact), over ``hw.clock_hz``; the fused epilogue once at the end.
* the shifts after a step depend only on which loops advance and, per rotating tensor, on the
  step counter of its axis modulo its rotation period (:meth:`OpLayout.shifts_after`). The
  schedule therefore has few *distinct* shift phases; :func:`shift_schedule` finds them and
  how often each occurs in closed form (it never walks the ``S`` steps), and each distinct
  phase is costed once on the topology with all cores vectorized.
* the replica reduction (output replicas summed into ring 0, as the functional device does;
  :func:`runtime_sim.machine.op_transfers.replica_reduction`)
  runs as the fastest of three schedules, as collective libraries pick per message size: a
  gather tree (radix 2: ``ceil(log2 R)`` rounds in which half of the remaining partial sums
  move one partition each; a wider radix: fewer rounds, each receiver taking up to
  ``radix - 1`` partitions; best for small partitions), a pipelined chain (every replica sends its
  partition, in shift-buffer sized chunks, to the next one towards ring 0, adding each chunk
  it receives before passing it on: ``n + R - 2`` chunk stages for ``n`` chunks; best for
  large partitions and few replicas) or a reduce-scatter followed by a gather (Rabenseifner's
  reduce: every replica sends each other replica its ``1/R`` piece and sums the pieces it
  receives, then ring 0 gathers the sums: two rounds, about ``2 (R - 1) / R`` partitions
  received per core; best for many replicas of a partition too large for a wide tree).
  The tree and the chain send ``(R - 1)`` partitions per output partition, the
  reduce-scatter its pieces and the gathered sums; the device counts the same bytes.
* a core-local reduction split across cores (:func:`runtime_sim.contract.plan_rules.local_splits`) combines
  its partial statistics after every step, level by level, within each group of cores that
  share rows: the fastest gather tree to the group's first core, then one multicast of the
  result back (:func:`runtime_sim.machine.links.split_combine_seconds` is its closed form); counted
  with the replica reduction (same phase, bytes and add time).
* the replica reduction's tree and the combine's gather have the radix of the closed form
  (:func:`runtime_sim.machine.links.best_gather_radix`); :func:`runtime_sim.machine.op_transfers.gather_tree_rounds` gives their
  flows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from runtime_sim.contract.energy import ActionCounts
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.machine.op_transfers import replica_reduction, split_combine
from runtime_sim.machine.phase_cost import NO_PHASE, PhaseCost
from runtime_sim.machine.topology_base import Topology
from schedules import template_for
from schedules.actions import op_actions

#: Distinct shift phases costed exactly per operator; beyond this many (a tensor rotating on
#: a long axis with very few partitions can give one distinct phase per step residue), the
#: most frequent phases are costed exactly and a stride sample of the others stands for them.
MAX_EXACT_PHASES = 48


@dataclass(frozen=True)
class ShiftPhase:
    """One distinct shift phase: events ``(axis, counter)`` fired together, ``count`` times.

    Each part names the axis that advances and a counter value of that axis at which
    :meth:`OpLayout.shifts_after` yields the phase's events for it.
    """

    parts: tuple[tuple[str, int], ...]
    count: int
    nbytes: int  # bytes received by all cores in one occurrence


def _axis_signatures(layout: OpLayout, a: str) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """For loop axis ``a``: which events fire at each counter residue.

    A tensor with temporal factor ``f`` on ``a`` shifts on the cores whose
    ``(counter + offset + 1)`` is a multiple of ``m = S / f``; so the events at a counter
    depend on it modulo ``M = max m`` only. Returns ``(inverse, representative, M,
    bytes_per_signature)``: ``inverse[r]`` numbers the distinct event sets of residues
    ``r < M``, ``representative[u]`` is a residue with event set ``u``.
    """
    S = layout.S[a]
    tensors = [t for t in range(len(layout.expr.tensors)) if layout.plan.ft(t, a) > 1]
    M = max(S // layout.plan.ft(t, a) for t in tensors)
    r = np.arange(M)
    sig = np.full((len(tensors), M), -1, np.int64)
    nbytes = np.zeros(M, np.int64)
    off = layout.offset[a]
    for row, t in enumerate(tensors):
        m = S // layout.plan.ft(t, a)
        movers = np.bincount(off % m, minlength=m)  # cores per phase value
        v = (-(r + 1)) % m
        fires = movers[v] > 0
        sig[row] = np.where(fires, v, -1)
        nbytes += movers[v] * layout.partition_bytes(t)
    _, first, inverse = np.unique(sig, axis=1, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    per_sig = nbytes[first]
    return inverse, first, M, per_sig


def shift_schedule(layout: OpLayout) -> list[ShiftPhase]:
    """The distinct shift phases of an operator and how many times each occurs.

    With loop axes ``a_0`` (outermost) .. ``a_{n-1}``, the step after which ``a_j`` advances
    without wrapping while every inner axis wraps occurs ``prod_{i<j} S_i`` times for each
    counter value ``0 .. S_j - 2`` of ``a_j``; after the very last step every loop wraps
    (tensors return home). Wrapping axes are at counter ``S - 1``. Counts sum to ``steps``.
    """
    axes = layout.loop_axes
    if not axes:
        return []
    info = {a: _axis_signatures(layout, a) for a in axes}

    def part(a: str, residue: int) -> tuple[tuple[str, int], int]:
        inverse, first, M, per_sig = info[a]
        u = inverse[residue % M]
        return (a, int(first[u])), int(per_sig[u])

    wraps = {a: part(a, layout.S[a] - 1) for a in axes}
    phases: dict[tuple[tuple[str, int], ...], list[int]] = {}

    def add(parts: list[tuple[tuple[str, int], int]], count: int) -> None:
        live = tuple(p for p, b in parts if b > 0)
        if not live or count <= 0:
            return
        nbytes = sum(b for _, b in parts)
        entry = phases.setdefault(live, [0, nbytes])
        entry[0] += count

    prefix = 1
    for j, a in enumerate(axes):
        S = layout.S[a]
        inverse, first, M, per_sig = info[a]
        r = np.arange(M)
        occurrences = np.where(r <= S - 2, (S - 2 - r) // M + 1, 0)
        per_u = np.bincount(inverse, weights=occurrences, minlength=first.size)
        inner = [wraps[b] for b in axes[j + 1:]]
        for u in np.flatnonzero(per_u):
            head = ((a, int(first[u])), int(per_sig[u]))
            add([head] + inner, prefix * int(per_u[u]))
        prefix *= S
    add([wraps[a] for a in axes], 1)
    return [ShiftPhase(parts, count, nbytes) for parts, (count, nbytes) in phases.items()]


def phase_flows(layout: OpLayout, parts: tuple[tuple[str, int], ...],
                cache: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flows of one shift phase: core ``c`` receives its tensor partition from ``source[c]``.

    ``cache`` (optional) keeps the flows of each part: phases share their wrap parts.
    """
    src, dst, nbytes = [], [], []
    for part in parts:
        hit = None if cache is None else cache.get(part)
        if hit is None:
            a, counter = part
            ps, pd, pb = [], [], []
            for event in layout.shifts_after({a: counter}, (a,)):
                moving = np.flatnonzero(event.moving)
                ps.append(event.source[moving])
                pd.append(moving)
                pb.append(np.full(moving.size, float(layout.partition_bytes(event.tensor))))
            hit = (ps, pd, pb)
            if cache is not None:
                cache[part] = hit
        src += hit[0]
        dst += hit[1]
        nbytes += hit[2]
    if not src:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return np.concatenate(src), np.concatenate(dst), np.concatenate(nbytes)


@dataclass(frozen=True)
class OpCost:
    """Everything about one operator's execution that does not depend on its neighbours."""

    layout: OpLayout
    steps: int
    step_s: float  # one sub-task plus the step's synchronization
    compute_s: float  # all steps
    epilogue_s: float
    flops: int
    shift: PhaseCost  # all shift phases of all steps, summed
    shift_phases: int  # steps followed by at least one shift
    distinct_shift_phases: int
    shift_sampled: bool
    rotation_bytes: int
    reduction: PhaseCost
    reduction_rounds: int
    reduction_compute_s: float
    reduction_bytes: int
    footprint_bytes: int  # tensor partitions per core (OpLayout.memory_bytes_per_core)
    #: what its cores compute and read and write of SRAM (:func:`schedules.actions.op_actions`)
    actions: ActionCounts = ActionCounts()

    @property
    def cores(self) -> int:
        return self.layout.num_cores

    @property
    def exec_s(self) -> float:
        """Steps, shifts, reduction and epilogue (re-layout of inputs excluded)."""
        return (self.compute_s + self.shift.time_s + self.reduction.time_s
                + self.reduction_compute_s + self.epilogue_s)


def op_cost(layout: OpLayout, hw: HardwareSpec, topo: Topology) -> OpCost:
    """Cost the steps, shifts and reduction of one operator (see the module docstring)."""
    expr = layout.expr
    template = template_for(expr.kind)
    clock = hw.clock_hz
    step_s = (template.subtask_cycles(expr, layout.rp, hw) + hw.sync_cycles) / clock
    out = len(expr.tensors) - 1
    out_partition = {a: layout.xp[a] // layout.plan.ft(out, a) for a in layout.axes}
    epilogue_s = template.epilogue_cycles(expr, out_partition, hw) / clock

    shift, shift_phases, sampled, rotation = NO_PHASE, 0, False, 0
    phases = shift_schedule(layout)
    exact = sorted(phases, key=lambda p: -p.count)
    rest = exact[MAX_EXACT_PHASES:]
    exact = exact[:MAX_EXACT_PHASES]
    part_flows: dict = {}
    P = layout.physical  # flows name physical cores

    def flows(parts: tuple[tuple[str, int], ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src, dst, nbytes = phase_flows(layout, parts, part_flows)
        return P[src], P[dst], nbytes

    for ph in exact:
        shift = shift + topo.phase(*flows(ph.parts)).scaled(ph.count)
    if rest:  # stand-ins for the long tail of rare phases
        sampled = True
        stride = max(1, len(rest) // MAX_EXACT_PHASES)
        sample = rest[::stride]
        mean = NO_PHASE
        for ph in sample:
            mean = mean + topo.phase(*flows(ph.parts))
        # the sample stands for the tail's time; the energy model counts every byte-hop, so
        # the tail's are summed exactly (the functional device counts each shift it makes)
        hops = shift.byte_hops + sum(topo.phase(*flows(ph.parts)).byte_hops * ph.count
                                     for ph in rest)
        shift = dataclasses.replace(shift + mean.scaled(sum(p.count for p in rest) / len(sample)),
                                    byte_hops=hops)
    for ph in phases:
        shift_phases += ph.count
        rotation += ph.count * ph.nbytes

    reduction, rounds, red_compute, red_bytes = replica_reduction(layout, hw, topo)
    comb, comb_rounds, comb_compute, comb_bytes = split_combine(layout, hw, topo)
    reduction, rounds = reduction + comb, rounds + comb_rounds
    red_compute, red_bytes = red_compute + comb_compute, red_bytes + comb_bytes
    return OpCost(
        layout=layout,
        steps=layout.steps,
        step_s=step_s,
        compute_s=layout.steps * step_s,
        epilogue_s=epilogue_s,
        flops=int(template.flops(expr, {})),
        shift=shift,
        shift_phases=shift_phases,
        distinct_shift_phases=len(phases),
        shift_sampled=sampled,
        rotation_bytes=rotation,
        reduction=reduction,
        reduction_rounds=rounds,
        reduction_compute_s=red_compute,
        reduction_bytes=red_bytes,
        footprint_bytes=layout.memory_bytes_per_core(),
        actions=op_actions(layout, hw),
    )
