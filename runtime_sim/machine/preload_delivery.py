"""How the device delivers a preload: HBM or host reads, then the on-chip distribution (Elk §4.3, §4.5).

The chunks a preload leaves on the cores are the contract's
(:mod:`runtime_sim.contract.preload_chunks`); this module prices their delivery on a
:class:`~runtime_sim.machine.topology_base.Topology`: the off-chip leg through the HBM
controllers or the host links (:meth:`Topology.io_load`), and the distribution phase in
which the cores that received a chunk multicast it to the replicas that hold it. The timing
simulator runs exactly these phases, and the compiler's Elk trade-off tables price every
preload-state point with the same functions, so the two cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime_sim.contract.expr import dtype_bytes
from runtime_sim.contract.hbm_reads import distinct_read_bytes
from runtime_sim.contract.layout import OpLayout, cost_key
from runtime_sim.contract.preload_chunks import (
    check_chunks,
    chip_read_bytes,
    chunk_range,
    delivered_bytes,
    delivery_groups,
    distribution,
    preload_bytes,
    replica_ranks,
)
from runtime_sim.contract.relayout import Boxes, input_boxes
from runtime_sim.machine.phase_cost import NO_PHASE, MulticastPattern, PhaseCost
from runtime_sim.machine.topology_base import Topology


@dataclass(frozen=True)
class PreloadDelivery:
    """One operator's preload from one off-chip source, as the network carries it (Elk §4.5
    ``preload_async``): the source reads each chip's distinct bytes once, the network
    multicasts each chunk to its :func:`delivery_groups`."""

    kind: str  # "hbm" or "host"
    network: PhaseCost  # delivery to every core that holds a chunk
    source_s: float  # the busiest source (HBM controller, host link): its bytes over its bandwidth
    unique_bytes: float  # what the sources send, summed over chips
    delivered_bytes: float  # summed over receiving cores (:func:`delivered_bytes`)
    distinct_bytes: tuple[float, ...]  # per input, its distinct bytes over the whole system
    space: np.ndarray  # per numbered core, the preload space it reserves (:func:`preload_bytes`)

    @property
    def duration_s(self) -> float:
        """The preload alone: the slower of its source and its network delivery."""
        return max(self.source_s, self.network.time_s)


def preload_delivery(topo: Topology, kind: str, layout: OpLayout, inputs: "tuple[int, ...]",
                     chunks: "tuple[int, ...]", boxes: "list[Boxes] | None" = None) -> PreloadDelivery:
    """The preload of ``layout``'s off-chip ``inputs`` from one source (``kind``), input
    ``inputs[i]`` in its state with ``chunks[i]`` chunks, on ``topo``'s network.

    The source reads :func:`chip_read_bytes` per chip; the network delivers each core its
    chunk (:func:`delivered_bytes`) from the home controllers or host link of the core's chip
    (:meth:`~runtime_sim.machine.topology_base.Topology.io_flows`), every group of cores holding the same
    chunk served by one multicast, all inputs in one phase
    (:meth:`~runtime_sim.machine.topology_base.Topology.io_load`). ``boxes``: the inputs'
    :func:`~runtime_sim.contract.relayout.input_boxes` if the caller has them."""
    n = layout.num_cores
    cores = layout.physical  # numbered core -> physical core
    chip_of = topo.node_chip[cores]
    unique = np.zeros(topo.num_chips)
    space = np.zeros(n, np.int64)
    delivered = 0.0
    distinct, flows = [], []
    for k, (t, s) in enumerate(zip(inputs, chunks)):
        box = input_boxes(layout, t) if boxes is None else boxes[k]
        unique += chip_read_bytes(layout, t, s, chip_of, topo.num_chips, box)
        distinct.append(distinct_read_bytes(box))
        space += preload_bytes(layout, t, s)
        nbytes = delivered_bytes(layout, t, s).astype(np.float64)
        delivered += float(nbytes.sum())
        flows.append(topo.io_flows(kind, cores, nbytes, delivery_groups(layout, t, s) * len(inputs) + k))
    src, dst, nbytes, group = (np.concatenate(parts) for parts in zip(*flows))
    network, source_s = topo.io_load(kind, src, dst, nbytes, group, unique)
    return PreloadDelivery(kind, network, source_s, float(unique.sum()), delivered,
                           tuple(distinct), space)


def distribution_pattern(topo: Topology, layout: OpLayout,
                         chunked: "tuple[tuple[int, int], ...]") -> MulticastPattern:
    """The distribution of an operator's chunked inputs (``(input, s)``; ``s <= 1``: not
    chunked) as a :class:`~runtime_sim.machine.phase_cost.MulticastPattern` on physical cores: every
    core multicasts the one chunk it holds of each input to the other members of its block,
    and receives the chunks it lacks (:func:`distribution`). The pieces are counted per block
    in O(cores); the explicit flows (for a network without multicast) are built on demand."""
    n = layout.num_cores
    phys = layout.physical
    chip_of = topo.node_chip[phys]
    # each list starts empty-but-typed: an operator without chunked inputs has no pieces
    src, size, receivers = [np.zeros(0, np.int64)], [np.zeros(0)], [np.zeros((0, topo.num_chips))]
    recv = np.zeros(topo.num_cores)
    for t, s in chunked:
        if s <= 1:
            continue
        check_chunks(layout, t, s)
        ids, rank = replica_ranks(layout, t)
        mine = rank % s
        lo, hi = chunk_range(layout, t, s, np.arange(s))
        chunk_bytes = ((hi - lo) * dtype_bytes(layout.expr.tensors[t].dtype)).astype(np.float64)
        # block of a core: its partition and its rank's group of s consecutive ranks
        block = ids * (layout.replicas(t) // s) + rank // s
        per_chip = np.bincount(block * topo.num_chips + chip_of,
                               minlength=(int(block.max()) + 1) * topo.num_chips)
        rx = per_chip.reshape(-1, topo.num_chips)[block].astype(np.float64)
        rx[np.arange(n), chip_of] -= 1  # the holder itself
        src.append(phys)
        size.append(chunk_bytes[mine])
        receivers.append(rx)
        np.add.at(recv, phys, chunk_bytes.sum() - chunk_bytes[mine])

    def flows() -> tuple:
        f_src, f_dst, f_group = ([np.zeros(0, np.int64)] for _ in range(3))
        f_bytes = [np.zeros(0)]
        for index, (t, s) in enumerate(chunked):
            if s <= 1:
                continue
            d = distribution(layout, t, s)
            f_src.append(phys[d.src])
            f_dst.append(phys[d.dst])
            f_bytes.append(d.nbytes.astype(np.float64))
            f_group.append(index * n + d.src)  # each core holds one chunk: its source names it
        return (np.concatenate(f_src), np.concatenate(f_dst), np.concatenate(f_bytes), 1.0,
                np.concatenate(f_group))

    return MulticastPattern(np.concatenate(src), np.concatenate(size), np.concatenate(receivers),
                            recv, flows)


def distribution_phase(topo: Topology, layout: OpLayout,
                       chunked: "tuple[tuple[int, int], ...]") -> tuple[PhaseCost, float]:
    """The distribution phase of an operator's chunked inputs (Elk §4.5 ``distribute_data``):
    :func:`distribution_pattern` costed as one phase
    (:meth:`~runtime_sim.machine.topology_base.Topology.multicast_phase`). Returns the phase and its bytes
    (summed over receivers)."""
    # costed once per network (Topology.phase_memo): the layout is its expression and plan
    key = ("distribution", cost_key(layout.expr, layout.plan), layout.cores_per_chip,
           tuple(chunked))
    hit = topo.phase_memo.get(key)
    if hit is None:
        pattern = distribution_pattern(topo, layout, chunked)
        total = float(pattern.recv_bytes.sum())
        hit = topo.phase_memo[key] = ((NO_PHASE, 0.0) if total <= 0
                                      else (topo.multicast_phase(pattern), total))
    return hit
