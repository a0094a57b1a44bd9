"""Transfers over a core's link and the replica-reduction schedule: the one closed form of each.

Part of the device contract (the compiler's cost models import it; so do the topologies and
the timing simulator), so it depends on :class:`~runtime_sim.contract.hardware.HardwareSpec` only.

* A transfer of ``b`` bytes over one link is cut into shift-buffer sized chunks (T10 §5), each
  paying the link latency once: ``b / link_bandwidth + ceil(b / shift_buffer_bytes) *
  link_latency_s`` (:func:`link_transfer_seconds`; the topologies add the latency term per hop
  on top of contended bandwidth, :func:`chunk_latency_seconds`). A transfer between chips also
  pays ``inter_chip_latency_s`` per chunk for every chip boundary it crosses, on top of the
  per-hop latency (``chip_hops``; the IPU-Link leg of an IPU-POD, see
  :mod:`runtime_sim.contract.presets`).
* Output replicas are summed into ring 0 by the fastest of three schedules, as collective
  libraries pick per message size (:func:`replica_reduction_schedule`): a gather tree, in
  each round of which a receiving core takes up to ``radix - 1`` partitions through its port,
  adds them on the vector unit and synchronizes (radix 2 is the binomial tree,
  ``ceil(log2 R)`` rounds; a radix >= R gathers everything in one round; the radix is the
  fastest power of two, :func:`best_gather_radix`: small partitions want few rounds, each
  paying a latency and a synchronization, large ones a narrow tree), or a pipelined chain of
  shift-buffer chunks, ``n + R - 2`` stages for ``n`` chunks, whose first chunk needs
  ``R - 2`` extra hops to reach ring 0; or a reduce-scatter followed by a gather
  (Rabenseifner's reduce; Thakur, Rabenseifner and Gropp, "Optimization of Collective
  Communication Operations in MPICH", IJHPCA 2005, §4.4): the partition is cut into ``R``
  pieces, in one exchange every replica sends each other replica its piece of the partition
  and adds the ``R - 1`` pieces it receives, then ring 0 gathers the summed pieces. Each core
  receives about ``2 (R - 1) / R`` partitions in two rounds instead of a tree's
  ``ceil(log2 R)`` partitions or a chain's ``R - 2`` extra hops, so it wins where partitions
  are large enough that bandwidth, not the rounds' latency and synchronization, dominates
  (:func:`split_pieces`). When the replicas lie on several chips (``chips > 1``) a fourth
  schedule is a candidate, the two-level reduction of hierarchical collectives (NCCL's and
  Horovod's hierarchical reduce; the one-level algorithms as in Thakur et al.): the fastest
  of the three among each chip's replicas into a chip leader (the owner on its own chip),
  then the fastest among the leaders into the owner, every transfer of that second level
  crossing chips (:func:`two_level_stages`). Alone on its links it is seldom faster than a
  one-level schedule (its levels' rounds add up); it wins on the network, where a one-level
  schedule sends most of its bytes over the shared inter-chip fabric and the two-level one
  a partial sum per chip (:func:`runtime_sim.machine.op_transfers.replica_reduction` routes
  both).

* Partial statistics of a core-local reduction split across ``G`` cores (a norm's sum of
  squares, softmax's max and sum of exp; :func:`runtime_sim.contract.plan_rules.local_splits`) are
  all-reduced per level: the fastest gather tree to the group's first core (as above, on
  statistics of a few bytes per row: usually one or two rounds), then one multicast of the
  combined statistics back to the group (one transfer, one synchronization)
  (:func:`split_combine_seconds`). Either way every core sends or receives exactly the bytes
  the functional device counts.

Every function takes scalars or numpy arrays (scalars in, Python floats out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from runtime_sim.contract.hardware import HardwareSpec


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


def crossing_bandwidth(hw: HardwareSpec, chip_hops=0) -> float:
    """The rate of one transfer alone on the network: the core's link, capped by the
    inter-chip fabric when it crosses chips (``chip_hops > 0``; what the topologies charge a
    lone flow, :meth:`runtime_sim.machine.topology_base.Topology._flow_alone`)."""
    if chip_hops and hw.inter_chip_bandwidth > 0:
        return min(hw.link_bandwidth, hw.inter_chip_bandwidth)
    return hw.link_bandwidth


def link_transfer_seconds(nbytes, hw: HardwareSpec, chip_hops=0):
    """One core sending or receiving ``nbytes`` over its own link, alone (0 for no bytes);
    ``chip_hops=1`` for a transfer to another chip, at the rate the topologies give a lone
    flow that crosses chips (:func:`crossing_bandwidth`) with the IPU-Link latency per chunk."""
    b = np.asarray(nbytes, np.float64)
    rate = crossing_bandwidth(hw, chip_hops)
    t = np.where(b > 0, b / rate + np.asarray(chunk_latency_seconds(b, hw, 1, chip_hops)), 0.0)
    return _out(t)


def gather_radices(group) -> list[int]:
    """Radices tried for a gather among up to ``group`` cores (scalar or array: its maximum):
    2, 4, 8, ... up to the first power of two >= the group (one round, every core straight
    to the root)."""
    g = float(np.max(np.asarray(group, np.float64))) if np.size(group) else 1.0
    top = max(1, int(math.ceil(math.log2(max(g, 2.0)))))
    return [2 ** k for k in range(1, top + 1)]


def gather_fan_ins(group, radix):
    """Per round of a radix-``radix`` gather tree among ``group`` cores, the most partial
    values one core receives: ``min(radix - 1, ceil(G / radix^j) - 1)`` in round ``j`` (the
    root receives the most). Returns ``(rounds, total fan-in)`` (arrays like ``group``): the
    number of rounds and the sum over rounds of the root's receives."""
    G = np.maximum(np.asarray(group, np.float64), 1.0)
    rounds = np.zeros_like(G)
    total = np.zeros_like(G)
    span = np.ones_like(G)  # radix^j
    while True:
        live = span < G
        if not live.any():
            break
        fan = np.minimum(radix - 1.0, np.ceil(G / span) - 1.0)
        rounds = rounds + live
        total = total + np.where(live, fan, 0.0)
        span = span * radix
    return _out(rounds), _out(total)


def gather_seconds(group, radix, nbytes, elements, hw: HardwareSpec, chip_hops=0):
    """Time of reducing ``group`` partial values of ``nbytes`` (``elements`` each) to one core
    by a radix-``radix`` tree, each transfer alone on its link: per round, the receiving core
    takes ``fan-in`` values through its port (``fan-in * nbytes / link_bandwidth``, every value
    its own chunks' latency, in parallel), adds them and synchronizes. ``chip_hops=1``: every
    transfer crosses chips (the chip leaders of a two-level reduction), paying the IPU-Link
    latency per chunk and the capped rate (:func:`crossing_bandwidth`)."""
    rounds, fan = gather_fan_ins(group, radix)
    b = np.asarray(nbytes, np.float64)
    lat = np.asarray(chunk_latency_seconds(b, hw, 1, chip_hops))
    add = np.asarray(elements, np.float64) / hw.vector_flops_per_cycle / hw.clock_hz
    sync = hw.sync_cycles / hw.clock_hz
    bw = crossing_bandwidth(hw, chip_hops)
    return _out(np.asarray(fan) * (b / bw + add) + np.asarray(rounds) * (lat + sync))


def best_gather_radix(group, nbytes, elements, hw: HardwareSpec, chip_hops=0):
    """The radix (of :func:`gather_radices`) of the fastest :func:`gather_seconds`, and that
    time; the smallest radix on ties. Collective libraries pick the tree's fan-in by message
    size the same way (small values: few rounds, each paying a latency and a
    synchronization; large ones: a narrow tree, each round one value per port).
    ``chip_hops``: as :func:`gather_seconds`."""
    G = np.asarray(group, np.float64)
    best_t = None
    best_r = None
    for r in gather_radices(G):
        t = np.asarray(gather_seconds(G, r, nbytes, elements, hw, chip_hops))
        if best_t is None:
            best_t, best_r = t, np.full(t.shape, float(r))
        else:
            better = t < best_t
            best_t = np.where(better, t, best_t)
            best_r = np.where(better, float(r), best_r)
    return _out(best_r), _out(best_t)


@dataclass(frozen=True)
class ReductionSchedule:
    """The three replica-reduction schedules of ``replicas`` copies of a ``partition_bytes``
    partition (arrays broadcast like the inputs; entries where ``R <= 1`` are meaningless).

    Tree: a gather tree of radix ``tree_radix`` (:func:`best_gather_radix`: 2 is the binomial
    tree), ``tree_rounds`` rounds; in each the receiving cores take up to ``radix - 1``
    partitions through their port, add them and synchronize (``tree_fan_in``: the root's
    receives over all rounds). Chain: one partition transfer (every replica to its
    neighbour, all at once), then ``chain_fill_s`` (the first chunk's ``R - 2`` extra hops),
    ``chain_add_s`` (adding every chunk) and one ``sync_s``. Reduce-scatter + gather
    (:func:`split_pieces`): every replica receives ``R - 1`` pieces of up to ``piece_bytes``
    and adds them (``piece_add_s`` each), then ring 0 receives the other ``pieces - 1`` sums;
    one synchronization per round.
    """

    replicas: object
    tree_rounds: object
    chunks: object
    add_s: object
    sync_s: float
    chain_fill_s: object
    chain_add_s: object
    tree_radix: object = 2.0
    tree_fan_in: object = None
    pieces: object = None  # reduce-scatter + gather: the non-empty pieces, at most R
    piece_elements: object = None  # the largest piece's elements, ceil(E / R)
    piece_bytes: object = None  # the largest piece's bytes
    piece_add_s: object = None  # adding one received piece of the largest size

    @property
    def chain_stages(self):
        """Chunk stages of the pipelined chain, ``n + R - 2``."""
        return _out(np.asarray(self.chunks) + np.asarray(self.replicas) - 2)

    @property
    def tree_adds_s(self):
        """Vector-unit adds and synchronizations of the tree."""
        fan = self.tree_rounds if self.tree_fan_in is None else self.tree_fan_in
        return _out(np.asarray(fan) * np.asarray(self.add_s) + np.asarray(self.tree_rounds) * self.sync_s)

    @property
    def chain_adds_s(self):
        """Vector-unit adds and the synchronization of the chain."""
        return _out(np.asarray(self.chain_add_s) + self.sync_s)

    @property
    def scatter_adds_s(self):
        """Vector-unit adds (``R - 1`` received pieces on the core summing the largest) and
        the two synchronizations of the reduce-scatter and the gather."""
        return _out((np.asarray(self.replicas) - 1) * np.asarray(self.piece_add_s) + 2 * self.sync_s)


def split_pieces(replicas, partition_bytes, partition_elements):
    """The pieces of a reduce-scatter of ``replicas`` copies of a partition of
    ``partition_elements`` elements (``partition_bytes`` bytes): ``(pieces, elements, bytes)``,
    the number of non-empty pieces (``min(R, E)``), the largest piece's elements
    (``ceil(E / R)``) and its bytes. Piece ``i`` holds ``E // R`` elements, one more for
    ``i < E % R``, so every element is summed on exactly one core."""
    R = np.maximum(np.asarray(replicas, np.float64), 1.0)
    E = np.asarray(partition_elements, np.float64)
    b = np.asarray(partition_bytes, np.float64)
    elems = np.ceil(E / R)
    per = np.where(E > 0, b / np.maximum(E, 1.0), 0.0)
    return _out(np.minimum(R, E)), _out(elems), _out(elems * per)


def replica_reduction_schedule(replicas, partition_bytes, partition_elements,
                               hw: HardwareSpec, chip_hops=0) -> ReductionSchedule:
    """Closed-form terms of the three reduction schedules (see the module docstring);
    ``chip_hops=1`` when every transfer crosses chips (among the chip leaders of a two-level
    reduction: :func:`crossing_bandwidth`, the IPU-Link latency per chunk and hop)."""
    R = np.asarray(replicas, np.float64)
    p = np.asarray(partition_bytes, np.float64)
    elems = np.asarray(partition_elements, np.float64)
    add = elems / hw.vector_flops_per_cycle / hw.clock_hz
    sync = hw.sync_cycles / hw.clock_hz
    bw = crossing_bandwidth(hw, chip_hops)
    radix, _ = best_gather_radix(R, p, elems, hw, chip_hops)
    radix = np.asarray(radix, np.float64)
    rounds = np.zeros(np.broadcast(R, radix).shape)
    fan = np.zeros_like(rounds)
    for r in np.unique(radix):
        n, f = gather_fan_ins(R, float(r))
        rounds = np.where(radix == r, n, rounds)
        fan = np.where(radix == r, f, fan)
    chunks = np.maximum(1.0, np.ceil(p / hw.shift_buffer_bytes))
    fill = (R - 2) * (p / chunks / bw + hop_latency_seconds(hw, 1, chip_hops))
    adds = (chunks + R - 2) * add / chunks
    pieces, piece_elems, piece_bytes = split_pieces(R, p, elems)
    piece_add = np.asarray(piece_elems) / hw.vector_flops_per_cycle / hw.clock_hz
    return ReductionSchedule(_out(R), _out(rounds), _out(chunks), _out(add), sync, _out(fill),
                             _out(adds), _out(radix), _out(fan), pieces, piece_elems, piece_bytes,
                             _out(piece_add))


def _flat_parts(replicas, partition_bytes, partition_elements, hw: HardwareSpec, chip_hops=0):
    """Per one-level schedule (tree, chain, reduce-scatter + gather), its link time, its adds
    and syncs, and the bytes its busiest core receives, with every transfer alone on its
    link (``chip_hops=1``: every transfer crosses chips, :func:`replica_reduction_schedule`):
    ``(schedule, links, adds, received)``, arrays stacked in that order on a new first axis."""
    R = np.asarray(replicas, np.float64)
    s = replica_reduction_schedule(R, partition_bytes, partition_elements, hw, chip_hops)
    p = np.asarray(partition_bytes, np.float64)
    q = np.asarray(s.piece_bytes, np.float64)
    bw = crossing_bandwidth(hw, chip_hops)
    # a tree's root takes its fan-in, a chain's ranks one partition each; in a
    # reduce-scatter every replica receives R - 1 pieces at once, then ring 0 the other
    # pieces - 1 sums
    tree_in = np.asarray(s.tree_fan_in) * p
    scatter_in = ((R - 1) + (np.asarray(s.pieces) - 1)) * q
    lat = np.asarray(chunk_latency_seconds(p, hw, 1, chip_hops))
    tree_link = tree_in / bw + np.asarray(s.tree_rounds) * lat
    chain_link = np.asarray(link_transfer_seconds(p, hw, chip_hops)) + s.chain_fill_s
    scatter_link = scatter_in / bw + 2 * np.asarray(chunk_latency_seconds(q, hw, 1, chip_hops))
    links = np.stack(np.broadcast_arrays(tree_link, chain_link, scatter_link))
    adds = np.stack(np.broadcast_arrays(np.asarray(s.tree_adds_s), np.asarray(s.chain_adds_s),
                                        np.asarray(s.scatter_adds_s)))
    received = np.stack(np.broadcast_arrays(tree_in, p, scatter_in))
    return s, links, adds, received


def two_level_sizes(replicas, chips):
    """The groups of a two-level reduction of ``replicas`` copies spread evenly over
    ``chips`` chips: ``(per chip, leaders)``, the replicas on the busiest chip
    (``ceil(R / C)``) and the chips holding any (``min(C, R)``), one leader each."""
    R = np.maximum(np.asarray(replicas, np.float64), 1.0)
    leaders = np.minimum(float(chips), R)
    return _out(np.ceil(R / leaders)), _out(leaders)


def _fastest_part(links, adds, received, live):
    """The fastest of stacked schedules (:func:`_flat_parts`) per entry: its link time, adds
    and received bytes, 0 where ``live`` is false (one replica: nothing to sum)."""
    best = np.argmin(links + adds, axis=0)[None, ...]
    return tuple(np.where(live, np.take_along_axis(a, best, axis=0)[0], 0.0)
                 for a in (links, adds, received))


def two_level_stages(per_chip, leaders, partition_bytes, partition_elements, hw: HardwareSpec):
    """The two levels of a two-level reduction, each transfer alone on its link: ``(on chip,
    across)`` as ``(link seconds, adds and syncs, bytes the owner receives)`` each, 0 for a
    level of one replica. The fastest one-level schedule among up to ``per_chip`` replicas of
    a chip into its leader (the owner on its own chip), then the fastest among up to
    ``leaders`` chip leaders into the owner, every transfer crossing chips (hierarchical
    collectives, module docstring)."""
    per_chip = np.asarray(per_chip, np.float64)
    leaders = np.asarray(leaders, np.float64)
    on_chip = _fastest_part(*_flat_parts(per_chip, partition_bytes, partition_elements, hw)[1:],
                            per_chip > 1)
    across = _fastest_part(*_flat_parts(leaders, partition_bytes, partition_elements, hw, 1)[1:],
                           leaders > 1)
    return on_chip, across


def _two_level_parts(replicas, partition_bytes, partition_elements, hw: HardwareSpec, chips: int):
    """The two-level schedule's link time, adds and the bytes its owner receives, for
    ``replicas`` spread evenly over ``chips`` chips (:func:`two_level_sizes`,
    :func:`two_level_stages`)."""
    on_chip, across = two_level_stages(*two_level_sizes(replicas, chips), partition_bytes,
                                       partition_elements, hw)
    return tuple(a + b for a, b in zip(on_chip, across))


def _reduction_parts(replicas, partition_bytes, partition_elements, hw: HardwareSpec, chips: int = 1):
    """Per schedule (tree, chain, reduce-scatter + gather and, on ``chips > 1``, two-level),
    its link time, its adds and syncs, and the bytes its busiest core receives, with every
    transfer alone on its link: ``(R, links, adds, received)``, arrays stacked in
    :data:`REDUCTION_SCHEDULES` order on a new first axis."""
    R = np.asarray(replicas, np.float64)
    _, links, adds, received = _flat_parts(R, partition_bytes, partition_elements, hw)
    if chips > 1:
        two = _two_level_parts(R, partition_bytes, partition_elements, hw, chips)
        links, adds, received = (np.concatenate([a, np.broadcast_to(b, a.shape[1:])[None, ...]])
                                 for a, b in zip((links, adds, received), two))
    return R, links, adds, received


#: The schedules of :func:`replica_reduction_seconds`, in the order of its tie-break; the
#: last only for replicas spread over several chips (``chips > 1``).
REDUCTION_SCHEDULES = ("tree", "chain", "scatter", "two-level")


def reduction_schedule_seconds(replicas, partition_bytes, partition_elements, hw: HardwareSpec,
                               chips: int = 1):
    """Each schedule's time (:data:`REDUCTION_SCHEDULES` order on the first axis; three rows
    when ``chips`` is 1), every transfer alone on its link; meaningless where ``R <= 1``."""
    _, links, adds, _ = _reduction_parts(replicas, partition_bytes, partition_elements, hw, chips)
    return links + adds


def fastest_reduction(replicas, partition_bytes, partition_elements, hw: HardwareSpec, chips: int = 1):
    """Which schedule (an index into :data:`REDUCTION_SCHEDULES`; the first on ties) sums
    ``replicas`` copies fastest, each transfer alone on its link, and its time; ``chips``:
    the chips the replicas are spread over (1: the one-level schedules only)."""
    R, links, adds, _ = _reduction_parts(replicas, partition_bytes, partition_elements, hw, chips)
    total = links + adds
    best = np.argmin(total, axis=0)
    return _out(best), _out(np.where(R > 1, np.min(total, axis=0), 0.0))


def replica_reduction_seconds(replicas, partition_bytes, partition_elements, hw: HardwareSpec,
                              chips: int = 1):
    """Time of the fastest schedule with every transfer costed alone on its link
    (:func:`link_transfer_seconds`); 0 where there is one replica. The timing simulator
    routes the same transfers on its topology instead (``runtime_sim.timing.opcost``)."""
    return fastest_reduction(replicas, partition_bytes, partition_elements, hw, chips)[1]


def replica_reduction_busy_seconds(replicas, partition_bytes, partition_elements, hw: HardwareSpec,
                                   chips: int = 1):
    """How long the fastest schedule of :func:`replica_reduction_seconds` holds link bandwidth:
    the bytes its busiest core receives over its link (a tree's root takes its fan-in, a
    chain's ranks one partition each, a reduce-scatter's ring 0 ``R - 1`` pieces and then
    the other summed pieces, a two-level schedule's owner both levels' bytes), hop latencies
    and the chain's fill excluded, as
    :attr:`runtime_sim.machine.phase_cost.PhaseCost.busy_s` counts the routed schedule. 0 where there
    is one replica."""
    R, links, adds, received = _reduction_parts(replicas, partition_bytes, partition_elements, hw, chips)
    best = np.argmin(links + adds, axis=0)
    busy = np.take_along_axis(received, np.asarray(best)[None, ...], axis=0)[0] / hw.link_bandwidth
    return _out(np.where(R > 1, busy, 0.0))


def bandwidth_view(hw: HardwareSpec) -> HardwareSpec:
    """``hw`` with free hops and synchronizations: a transfer costed on it in closed form
    takes the time its bytes hold link bandwidth and no more (what
    :attr:`runtime_sim.machine.phase_cost.PhaseCost.busy_s` is for a routed phase), the link time a
    preload streaming meanwhile cannot use (:mod:`runtime_sim.machine.stream_timing`)."""
    return hw.with_overrides(link_latency_s=0.0, inter_chip_latency_s=0.0, sync_cycles=0)


def combine_rounds(group):
    """Tree rounds of one binomial reduction among ``group`` cores."""
    return _out(np.ceil(np.log2(np.maximum(np.asarray(group, np.float64), 1.0))))


def combine_radix(group, elements, hw: HardwareSpec, stat_bytes: int = 4):
    """Radix of the gather of one combine level (:func:`best_gather_radix` for ``elements``
    float32 statistics per core)."""
    e = np.asarray(elements, np.float64)
    return best_gather_radix(group, e * stat_bytes, e, hw)[0]


def split_combine_seconds(group, level_elements, hw: HardwareSpec, stat_bytes: int = 4):
    """Time of all-reducing partial statistics among ``group`` cores, level after level
    (``level_elements``: a sequence of statistic elements per core, one per level, scalars or
    arrays), every transfer costed alone on its link; 0 where ``group <= 1``. Per level: the
    fastest gather tree to the group's first core (:func:`best_gather_radix`), then one
    broadcast of the combined statistics back to the group (the exchange multicasts: one
    transfer and one synchronization)."""
    G = np.asarray(group, np.float64)
    sync = hw.sync_cycles / hw.clock_hz
    total = np.zeros(np.broadcast(G, *[np.asarray(e) for e in level_elements]).shape) if level_elements \
        else np.zeros_like(G)
    for elems in level_elements:
        e = np.asarray(elems, np.float64)
        _, up = best_gather_radix(G, e * stat_bytes, e, hw)
        down = np.asarray(link_transfer_seconds(e * stat_bytes, hw)) + sync
        total = total + np.asarray(up) + down
    return _out(np.where(G > 1, total, 0.0))
