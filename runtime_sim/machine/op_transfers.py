"""The transfer phases of one operator on a network, as both executors count them.

The timing simulator times these phases (:mod:`runtime_sim.timing.work`,
:mod:`runtime_sim.timing.opcost`); the functional device, which moves data by indexing
arrays and has no network, asks the same functions for the link byte-hops of the transfers it
performs (:attr:`~runtime_sim.machine.phase_cost.PhaseCost.byte_hops`, priced by the energy
model), so that the two count one value:

* :func:`replica_reduction` and :func:`split_combine`: the replica reduction into ring 0 (the
  fastest of a gather tree, a pipelined chain, a reduce-scatter + gather and, for replicas
  on several chips, the two-level schedule, :func:`two_level_groups`) and the combine of
  split core-local reductions;
* :func:`relayout_phase`: one input's re-layout from where it waits (exact box overlaps,
  multicast onto replicas);
* :func:`load_delivery`: one operator's loads from one off-chip source (HBM or the host),
  delivered to every core that needs them;
* :func:`host_return`: an operator's output returned to the host from the cores that own it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from runtime_sim.contract.expr import dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.hbm_reads import distinct_read_bytes
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan_rules import STAT_BYTES
from runtime_sim.contract.relayout import BlockGrid, Boxes, input_relayout
from runtime_sim.machine.links import combine_radix, gather_fan_ins, replica_reduction_schedule
from runtime_sim.machine.phase_cost import NO_PHASE, PhaseCost, relayout_pattern
from runtime_sim.machine.topology_base import Topology

__all__ = ["gather_tree_rounds", "host_return", "load_delivery", "relayout_phase",
           "replica_reduction", "split_combine", "two_level_groups"]


def relayout_phase(topo: Topology, grid: BlockGrid, layout: OpLayout, t: int,
                   boxes: Boxes) -> tuple[PhaseCost, float, bool]:
    """The re-layout of input ``t`` of ``layout`` from ``grid`` (where it waits, as blocks on
    cores) into its boxes ``boxes`` (:func:`runtime_sim.contract.relayout.input_boxes`): its
    phase (a multicast onto replicas), the bytes cores receive and whether a stride sample
    of its flows stood for them (a gathered input's rows: the uniform-ids estimate)."""
    placed = boxes.placed(layout.physical, layout.span)
    rl = input_relayout(grid, layout, t, topo.node_chip, topo.num_chips, boxes=placed)
    sampled = [rl.box_weight > 1]

    def mark_sampled() -> None:
        sampled[0] = True

    phase = topo.multicast_phase(relayout_pattern(rl, mark_sampled))
    return phase, rl.moved_bytes, sampled[0]


def load_delivery(topo: Topology, kind: str, layout: OpLayout,
                  boxes: Sequence[Boxes]) -> tuple[PhaseCost, float, float, float, tuple[float, ...]]:
    """One operator's loads from one off-chip source, ``kind`` ``"hbm"`` or ``"host"``: its
    inputs' ``boxes`` (unplaced, in input order) to every core that needs them, cores with
    equal boxes (replicas) served by one multicast each.

    Returns
    -------
    tuple
        The network's phase, the source's seconds (controllers or host links: each chip's
        unique bytes over their bandwidth), the unique bytes per chip summed over chips, the
        bytes delivered (summed over receiving cores) and each input's distinct bytes.
    """
    hw = topo.hw
    n = layout.num_cores
    cores = layout.physical  # numbered core -> physical core
    chip_of = topo.node_chip[cores]
    per_core = np.zeros(n)
    unique = np.zeros(hw.num_chips)
    distinct = []
    flows = []
    for box in boxes:
        per_core += box.nbytes
        unique += box.unique_bytes_per_chip(chip_of, hw.num_chips)
        distinct.append(distinct_read_bytes(box))
        # cores with equal boxes (replicas) need the same bytes: one multicast each
        rows = np.concatenate([box.lo, box.hi], axis=1)
        group = (np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1) if rows.shape[1]
                 else np.zeros(n, np.int64))
        flows.append(topo.io_flows(kind, cores, box.nbytes, group * len(boxes) + len(flows)))
    src, dst, nbytes, group = (np.concatenate(parts) for parts in zip(*flows))
    network, source_s = topo.io_load(kind, src, dst, nbytes, group, unique)
    return network, source_s, float(unique.sum()), float(per_core.sum()), tuple(distinct)


def host_return(topo: Topology, layout: OpLayout) -> tuple[PhaseCost, float, float]:
    """The chip -> host return of ``layout``'s output: the cores holding it (ring 0) send
    their partitions over their chip's host link (``host_bandwidth`` per chip); the network
    leg is the mirrored delivery (cores -> host node). Returns the phase, the host links'
    seconds and the bytes returned."""
    hw = topo.hw
    out = len(layout.expr.tensors) - 1
    owners = layout.physical[np.asarray(layout.owners(), np.int64)]
    per_core = np.full(owners.size, float(layout.partition_bytes(out)))
    per_chip = np.bincount(topo.node_chip[owners], weights=per_core, minlength=hw.num_chips)
    src, dst, nbytes = topo.io_flows("host", owners, per_core)
    network = topo.phase(src, dst, nbytes)
    return network, float(per_chip.max()) / hw.host_bandwidth, float(per_core.sum())


def replica_reduction(layout: OpLayout, hw: HardwareSpec, topo: Topology) -> tuple[PhaseCost, int, float, int]:
    """(transfer cost, stages, add seconds, bytes) of the fastest replica-reduction schedule
    of ``layout``'s output replicas into ring 0: a gather tree, a pipelined chain or a
    reduce-scatter + gather, as collective libraries pick per message size
    (:func:`replica_reduction_schedule`), and, when the replicas of an output partition lie
    on several chips, the two-level schedule of hierarchical collectives (the fastest of
    those among each chip's replicas into a chip leader, then among the leaders into the
    owner, :func:`two_level_groups`). The tree and the chain send ``(R - 1)`` partitions
    per output partition, the reduce-scatter its pieces and then the sums ring 0 gathers; the
    functional device counts the bytes of the schedule chosen here
    (:meth:`runtime_sim.functional.link_hops.LinkHops.reduction_sent_bytes`)."""
    out = len(layout.expr.tensors) - 1
    R = layout.replicas(out)
    if R <= 1:
        return NO_PHASE, 0, 0.0, 0
    core = np.arange(layout.num_cores)
    owner_of = layout.output_owner_of()
    # a replica sends its output partition (an attention operator's running max and sum too)
    pbytes = layout.replica_bytes()
    # (adds counted per output element's worth of bytes, as the compiler's model counts them)
    elems = pbytes // dtype_bytes(layout.expr.output.dtype)
    # group by owner, the owner first: rank 0 is the root of each group's tree or chain
    flat = _fastest_routed(*_ranked(core, owner_of, core == owner_of), pbytes, elems, hw, topo, layout.physical)
    chip = topo.node_chip[layout.physical]
    groups = two_level_groups(owner_of, chip)
    if groups is None:
        return flat[1:]
    on_chip, leaders = groups
    first = _fastest_routed(*on_chip, pbytes, elems, hw, topo, layout.physical)
    second = _fastest_routed(*leaders, pbytes, elems, hw, topo, layout.physical, chip_hops=1)
    if first[0] + second[0] < flat[0]:
        return first[1] + second[1], first[2] + second[2], first[3] + second[3], first[4] + second[4]
    return flat[1:]


def _ranked(cores: np.ndarray, key: np.ndarray, root: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``cores`` grouped by ``key``, each group's ``root`` first, then in core order: the
    cores in that order and their rank within their group (0 = the root)."""
    order = np.lexsort((cores, ~root, key))
    sorted_key = key[order]
    head = np.searchsorted(sorted_key, sorted_key, side="left")
    return cores[order], np.arange(order.size) - head


def two_level_groups(owner_of: np.ndarray, chip: np.ndarray):
    """The two levels of a reduction whose numbered core ``c`` sends its replica to
    ``owner_of[c]`` and sits on chip ``chip[c]``, or ``None`` when every owner's replicas
    share its chip (one level is the whole reduction). Level one groups each owner's
    replicas per chip, the owner first on its chip and the lowest core leading on the others;
    level two groups each owner's chip leaders, the owner first. Each level as
    ``(cores, ranks)`` (:func:`_ranked`)."""
    if not (chip[owner_of] != chip).any():
        return None
    core = np.arange(owner_of.size)
    is_owner = core == owner_of
    chips = int(chip.max()) + 1
    on_chip = _ranked(core, owner_of * chips + chip, is_owner)
    lead = on_chip[0][on_chip[1] == 0]
    return on_chip, _ranked(lead, owner_of[lead], is_owner[lead])


def _fastest_routed(cores: np.ndarray, rank: np.ndarray, pbytes: int, elems: int, hw: HardwareSpec,
                    topo: Topology, physical: np.ndarray,
                    chip_hops: int = 0) -> tuple[float, PhaseCost, int, float, int]:
    """The fastest of the gather tree, the chain and the reduce-scatter + gather among groups
    of replicas (``cores`` in group order, ``rank`` 0 the root; groups of up to the largest
    size), routed on ``topo`` (``physical``: numbered core -> physical core) and added as
    the closed form of the largest group counts (``chip_hops=1`` when every transfer crosses
    chips, :func:`replica_reduction_schedule`): ``(seconds, transfer cost, stages, add
    seconds, bytes)``; the first of the three on ties."""
    size = int(rank.max()) + 1
    if size <= 1:  # every replica is its group's root: nothing to sum
        return 0.0, NO_PHASE, 0, 0.0, 0
    schedule = replica_reduction_schedule(size, pbytes, elems, hw, chip_hops)
    P = physical[cores]  # flows name physical cores
    radix = int(schedule.tree_radix)
    tree, rounds, sent = NO_PHASE, 0, 0
    for src_rank, dst_rank in gather_tree_rounds(rank, size, radix):
        tree = tree + topo.phase(P[src_rank], P[dst_rank], np.full(src_rank.size, float(pbytes)))
        sent += src_rank.size * pbytes
        rounds += 1
    assert rounds == schedule.tree_rounds
    tree_adds = schedule.tree_adds_s

    # chain: rank r sends to rank r-1; the first chunk needs R-2 extra hops to reach ring 0
    senders = np.flatnonzero(rank > 0)
    chain = topo.phase(P[senders], P[senders - 1], np.full(senders.size, float(pbytes)))
    fill = schedule.chain_fill_s
    chain = chain + PhaseCost(fill, fill, 0.0, 0.0, 0.0, 0.0)
    chain_adds = schedule.chain_adds_s

    scatter, scatter_sent = _scatter_gather(rank, P, pbytes, elems, topo)
    scatter_adds = schedule.scatter_adds_s
    best = min(((tree.time_s + tree_adds, 0), (chain.time_s + chain_adds, 1),
                (scatter.time_s + scatter_adds, 2)))
    if best[1] == 1:
        return best[0], chain, int(schedule.chain_stages), chain_adds, senders.size * pbytes
    if best[1] == 2:
        return best[0], scatter, 2, scatter_adds, scatter_sent
    return best[0], tree, rounds, tree_adds, sent


def _scatter_gather(rank: np.ndarray, physical: np.ndarray, pbytes: int, elems: int,
                    topo: Topology) -> tuple[PhaseCost, int]:
    """The reduce-scatter + gather schedule of groups of replicas whose ranks (0 = the owner)
    are ``rank`` on physical cores ``physical`` (:func:`runtime_sim.machine.links.split_pieces`):
    in one phase every rank of a group of ``s`` sends piece ``j`` (of ``s``) of its partition
    to rank ``j``, which sums it; then every rank sends its summed piece to rank 0. Returns
    the two phases' cost and the bytes sent. A piece holds whole elements (an attention
    replica's running max and sum are cut with its output, as the closed form counts them)."""
    n = rank.size
    head = np.arange(n) - rank
    size = np.bincount(head, minlength=n)[head]  # each position's group size
    per = pbytes / max(elems, 1)

    def piece(j: np.ndarray, s: np.ndarray) -> np.ndarray:  # bytes of piece j of s
        return (elems // s + (j < elems % s)) * per

    sends = size - 1
    src_pos = np.repeat(np.arange(n), sends)
    offset = np.arange(src_pos.size) - np.repeat(np.cumsum(sends) - sends, sends) + 1
    dst_rank = (rank[src_pos] + offset) % size[src_pos]
    dst_pos = head[src_pos] + dst_rank
    nbytes = piece(dst_rank, size[src_pos])
    scatter = topo.phase(physical[src_pos], physical[dst_pos], nbytes)
    rest = np.flatnonzero(rank > 0)
    gathered = piece(rank[rest], size[rest])
    gather = topo.phase(physical[rest], physical[head[rest]], gathered)
    return scatter + gather, int(round(nbytes.sum() + gathered.sum()))


def split_combine(layout: OpLayout, hw: HardwareSpec, topo: Topology) -> tuple[PhaseCost, int, float, int]:
    """(transfer cost, rounds, add and sync seconds, bytes) of combining the partial statistics
    of split core-local reductions over all steps: per step and level, the fastest gather
    tree to each group's first core, then one multicast of the result back
    (:func:`runtime_sim.machine.links.split_combine_seconds` is its closed form)."""
    G = layout.combine_size
    levels = layout.combine_levels()
    if G <= 1 or not levels:
        return NO_PHASE, 0, 0.0, 0
    n = layout.num_cores
    group = layout.combine_groups
    core = np.arange(n)
    order = np.lexsort((core, group))  # each group in core order; rank 0 is the root
    head = np.searchsorted(group[order], group[order], side="left")
    rank = np.arange(n) - head
    sync = hw.sync_cycles / hw.clock_hz
    cost, rounds, compute, sent = NO_PHASE, 0, 0.0, 0
    rest = np.flatnonzero(rank > 0)
    root = np.flatnonzero(rank == 0)[np.searchsorted(group[order][rank == 0], group[order][rest])]
    for elems in levels:
        nbytes = float(elems * STAT_BYTES)
        radix = int(combine_radix(G, elems, hw, STAT_BYTES))
        up = NO_PHASE
        for src_rank, dst_rank in gather_tree_rounds(rank, G, radix):
            src, dst = layout.physical[order[src_rank]], layout.physical[order[dst_rank]]
            up = up + topo.phase(src, dst, np.full(src.size, nbytes))
            sent += src.size * int(nbytes)
            rounds += 1
        n_up, fan = gather_fan_ins(G, radix)
        compute += fan * elems / hw.vector_flops_per_cycle / hw.clock_hz + n_up * sync
        # the combined statistics back from each group's root to its members, multicast
        down = topo.phase(layout.physical[order[root]], layout.physical[order[rest]],
                          np.full(rest.size, nbytes), multicast=group[order][rest])
        sent += rest.size * int(nbytes)
        compute += sync
        rounds += 1
        cost = cost + up + down
    steps = layout.steps
    return cost.scaled(steps), rounds * steps, compute * steps, sent * steps


def gather_tree_rounds(rank: np.ndarray, size: int, radix: int):
    """The rounds of a radix-``radix`` gather tree over groups of ``size`` cores whose ranks
    (0 = the root) are ``rank``: per round, (sender positions, receiver positions) into
    ``rank``'s array. In round ``j`` (``span = radix^j``) a rank that is a multiple of
    ``span`` but not of ``radix * span`` sends to the rank below it that is."""
    pos = np.arange(rank.size)
    span = 1
    while span < size:
        digit = (rank // span) % radix
        senders = np.flatnonzero((rank % span == 0) & (digit != 0))
        yield senders, pos[senders] - digit[senders] * span
        span *= radix
