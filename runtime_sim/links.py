"""Transfers over a core's link and the replica-reduction schedule: the one closed form of each.

Part of the device contract (the compiler's cost models import it; so do the topologies and
the timing simulator), so it depends on :class:`~runtime_sim.hardware.HardwareSpec` only.

* A transfer of ``b`` bytes over one link is cut into shift-buffer sized chunks (T10 §5), each
  paying the link latency once: ``b / link_bandwidth + ceil(b / shift_buffer_bytes) *
  link_latency_s`` (:func:`link_transfer_seconds`; the topologies add the latency term per hop
  on top of contended bandwidth, :func:`chunk_latency_seconds`). A transfer between chips also
  pays ``inter_chip_latency_s`` per chunk for every chip boundary it crosses, on top of the
  per-hop latency (``chip_hops``; the IPU-Link leg of an IPU-POD, see
  :mod:`runtime_sim.hardware`).
* Output replicas are summed into ring 0 by the faster of two schedules, as collective
  libraries pick per message size (:func:`replica_reduction_schedule`): a binomial tree,
  ``ceil(log2 R)`` rounds each moving one partition and adding it on the vector unit, or a
  pipelined chain of shift-buffer chunks, ``n + R - 2`` stages for ``n`` chunks, whose first
  chunk needs ``R - 2`` extra hops to reach ring 0.

* Partial statistics of a core-local reduction split across ``G`` cores (a norm's sum of
  squares, softmax's max and sum of exp; :func:`runtime_sim.layout.local_splits`) are
  all-reduced per level: a binomial tree to the group's first core, ``ceil(log2 G)`` rounds
  each one transfer, one vector add and one synchronization, then the same tree back (a
  broadcast, transfer and synchronization per round) (:func:`split_combine_seconds`).
  Statistics are a few bytes per row, so the tree, not the chain, is the schedule.

Every function takes scalars or numpy arrays (scalars in, Python floats out).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .hardware import HardwareSpec


def _out(value: np.ndarray):
    return float(value) if np.ndim(value) == 0 else value


def transfer_chunks(nbytes, hw: HardwareSpec):
    """Shift-buffer sized pieces of a transfer of ``nbytes`` (one piece without a buffer)."""
    b = np.asarray(nbytes, np.float64)
    buf = hw.shift_buffer_bytes
    return _out(np.ceil(b / buf) if buf > 0 else np.ones_like(b))


def hop_latency_seconds(hw: HardwareSpec, hops=1, chip_hops=0):
    """Latency one chunk pays over ``hops`` links of which ``chip_hops`` cross between chips:
    ``hops * link_latency_s + chip_hops * inter_chip_latency_s`` (a chip crossing is a hop
    too, and pays the IPU-Link latency on top)."""
    return _out(np.asarray(hops, np.float64) * hw.link_latency_s
                + np.asarray(chip_hops, np.float64) * hw.inter_chip_latency_s)


def chunk_latency_seconds(nbytes, hw: HardwareSpec, hops=1, chip_hops=0):
    """Latency of a transfer of ``nbytes`` over ``hops`` links, ``chip_hops`` of them between
    chips (booleans count as 0/1): every chunk pays every hop (:func:`hop_latency_seconds`)."""
    return _out(np.asarray(transfer_chunks(nbytes, hw)) * np.asarray(hop_latency_seconds(hw, hops, chip_hops)))


def link_transfer_seconds(nbytes, hw: HardwareSpec, chip_hops=0):
    """One core sending or receiving ``nbytes`` over its own link, alone (0 for no bytes);
    ``chip_hops=1`` for a transfer to another chip (its bandwidth is still the core's link:
    the inter-chip cap is a shared resource the topologies charge)."""
    b = np.asarray(nbytes, np.float64)
    t = np.where(b > 0, b / hw.link_bandwidth + np.asarray(chunk_latency_seconds(b, hw, 1, chip_hops)), 0.0)
    return _out(t)


@dataclass(frozen=True)
class ReductionSchedule:
    """The two replica-reduction schedules of ``replicas`` copies of a ``partition_bytes``
    partition (arrays broadcast like the inputs; entries where ``R <= 1`` are meaningless).

    Tree: ``tree_rounds`` rounds, each one partition transfer plus ``add_s + sync_s``.
    Chain: one partition transfer (every replica to its neighbour, all at once), then
    ``chain_fill_s`` (the first chunk's ``R - 2`` extra hops), ``chain_add_s`` (adding every
    chunk) and one ``sync_s``.
    """

    replicas: object
    tree_rounds: object
    chunks: object
    add_s: object
    sync_s: float
    chain_fill_s: object
    chain_add_s: object

    @property
    def chain_stages(self):
        """Chunk stages of the pipelined chain, ``n + R - 2``."""
        return _out(np.asarray(self.chunks) + np.asarray(self.replicas) - 2)

    @property
    def tree_adds_s(self):
        """Vector-unit adds and synchronizations of the tree."""
        return _out(np.asarray(self.tree_rounds) * (np.asarray(self.add_s) + self.sync_s))

    @property
    def chain_adds_s(self):
        """Vector-unit adds and the synchronization of the chain."""
        return _out(np.asarray(self.chain_add_s) + self.sync_s)


def replica_reduction_schedule(replicas, partition_bytes, partition_elements,
                               hw: HardwareSpec) -> ReductionSchedule:
    """Closed-form terms of both reduction schedules (see the module docstring)."""
    R = np.asarray(replicas, np.float64)
    p = np.asarray(partition_bytes, np.float64)
    add = np.asarray(partition_elements, np.float64) / hw.vector_flops_per_cycle / hw.clock_hz
    sync = hw.sync_cycles / hw.clock_hz
    rounds = np.ceil(np.log2(np.maximum(R, 1.0)))
    chunks = np.maximum(1.0, np.ceil(p / hw.shift_buffer_bytes))
    fill = (R - 2) * (p / chunks / hw.link_bandwidth + hw.link_latency_s)
    adds = (chunks + R - 2) * add / chunks
    return ReductionSchedule(_out(R), _out(rounds), _out(chunks), _out(add), sync, _out(fill),
                             _out(adds))


def replica_reduction_seconds(replicas, partition_bytes, partition_elements, hw: HardwareSpec):
    """Time of the faster schedule with every transfer costed alone on its link
    (:func:`link_transfer_seconds`); 0 where there is one replica. The timing simulator
    routes the same transfers on its topology instead (``runtime_sim.timing.opcost``)."""
    R = np.asarray(replicas, np.float64)
    s = replica_reduction_schedule(R, partition_bytes, partition_elements, hw)
    one = np.asarray(link_transfer_seconds(partition_bytes, hw))
    tree = np.asarray(s.tree_rounds) * (one + s.add_s + s.sync_s)
    chain = one + s.chain_fill_s + s.chain_add_s + s.sync_s
    return _out(np.where(R > 1, np.minimum(tree, chain), 0.0))


def combine_rounds(group):
    """Tree rounds of one reduction (and of one broadcast) among ``group`` cores."""
    return _out(np.ceil(np.log2(np.maximum(np.asarray(group, np.float64), 1.0))))


def split_combine_seconds(group, level_elements, hw: HardwareSpec, stat_bytes: int = 4):
    """Time of all-reducing partial statistics among ``group`` cores, level after level
    (``level_elements``: a sequence of statistic elements per core, one per level, scalars or
    arrays), every transfer costed alone on its link; 0 where ``group <= 1``."""
    G = np.asarray(group, np.float64)
    rounds = np.asarray(combine_rounds(G))
    sync = hw.sync_cycles / hw.clock_hz
    total = np.zeros(np.broadcast(G, *[np.asarray(e) for e in level_elements]).shape) if level_elements \
        else np.zeros_like(G)
    for elems in level_elements:
        e = np.asarray(elems, np.float64)
        one = np.asarray(link_transfer_seconds(e * stat_bytes, hw))
        add = e / hw.vector_flops_per_cycle / hw.clock_hz
        total = total + rounds * (2 * (one + sync) + add)
    return _out(np.where(G > 1, total, 0.0))
