"""What a preload leaves on the cores, and what distribution moves (Elk §4.3, §4.5).

An operator's off-chip input ``t`` is needed, under its execute-state plan, as one partition
per core (:class:`runtime_sim.contract.layout.OpLayout`); a partition is shared by ``S`` replica
cores (``OpLayout.replicas``: the cores whose :meth:`~runtime_sim.contract.layout.OpLayout.partition_key`
is equal). Its *preload state* with ``s`` chunks (``s`` divides ``S``, Elk §4.3 "each
execute-state plan may have many preload-state plans"):

* the partition is cut into ``s`` chunks of ``ceil(elements / s)`` elements (row-major, the
  last chunk shorter or empty);
* the replicas of a partition, ranked by numbered core, hold chunk ``rank mod s``: HBM
  delivers each chunk once per chip and the network multicasts it to the ``S / s`` cores
  holding it (at ``s = 1`` every replica receives the whole partition: MaxPreload; at
  ``s = S`` each receives one ``S``-th: MinPreload);
* at execute time the *distribution* phase completes every core's partition: the replicas of
  ranks ``b*s .. b*s + s - 1`` (block ``b``) exchange their chunks, an all-gather within the
  block, so each core receives the ``s - 1`` chunks it lacks from the members of its own block.

This module is the one definition, used by the compiler (preload space and distribution
bytes of each preload-state plan), the functional device (which chunk each core stores and
where it fetches the rest) and the timing simulator (delivery multicast groups and
distribution flows), and so is what the network does with them (:func:`preload_delivery`,
:func:`distribution_phase`): the timing simulator runs those phases and the Elk tables price
every preload-state plan with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from runtime_sim.contract.errors import InvalidPlanError
from runtime_sim.contract.expr import dtype_bytes
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.relayout import Boxes, input_boxes


def replica_ranks(layout: OpLayout, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Per numbered core: the id of the partition of input ``t`` it holds (dense, 0..) and its
    rank among that partition's replicas (by numbered core)."""
    key = layout.partition_key(t)
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    ids_sorted = np.concatenate([[0], np.cumsum(sorted_key[1:] != sorted_key[:-1])]) if key.size else key
    first = np.searchsorted(sorted_key, sorted_key, side="left")
    rank = np.empty_like(key)
    rank[order] = np.arange(key.size) - first
    ids = np.empty_like(key)
    ids[order] = ids_sorted
    return ids.astype(np.int64), rank.astype(np.int64)


def chunk_options(layout: OpLayout, t: int) -> list[int]:
    """Valid chunk counts of input ``t``: the divisors of its replica count ``S``."""
    S = layout.replicas(t)
    return [s for s in range(1, S + 1) if S % s == 0]


def check_chunks(layout: OpLayout, t: int, s: int) -> None:
    S = layout.replicas(t)
    if s < 1 or S % s:
        raise InvalidPlanError(
            f"input {t} ('{layout.expr.tensors[t].name}') cannot be preloaded in {s} chunks: "
            f"its partitions have {S} replicas and the chunk count must divide it"
        )


def _elements(layout: OpLayout, t: int) -> int:
    return int(np.prod(layout.partition_shape(t), dtype=np.int64))


def chunk_elements(layout: OpLayout, t: int, s: int) -> int:
    """Elements of one chunk (the last chunk of a partition may be shorter)."""
    return math.ceil(_elements(layout, t) / s)


def chunk_range(layout: OpLayout, t: int, s: int, k: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Flat element range ``[lo, hi)`` of chunk ``k`` within a partition of input ``t``."""
    n, ce = _elements(layout, t), chunk_elements(layout, t, s)
    k = np.asarray(k, np.int64)
    return np.minimum(k * ce, n), np.minimum((k + 1) * ce, n)


def held_chunk(layout: OpLayout, t: int, s: int) -> np.ndarray:
    """Per numbered core, the chunk of its partition of input ``t`` it holds after preload."""
    check_chunks(layout, t, s)
    return replica_ranks(layout, t)[1] % s


def preload_bytes(layout: OpLayout, t: int, s: int) -> int:
    """Preload space one core reserves for input ``t`` (its chunk, the largest one)."""
    check_chunks(layout, t, s)
    return chunk_elements(layout, t, s) * dtype_bytes(layout.expr.tensors[t].dtype)


@dataclass(frozen=True)
class Distribution:
    """The distribution phase of one input (Elk §4.5 ``distribute_data``), per transfer:
    numbered destination and source cores, the chunk moved and its bytes."""

    dst: np.ndarray
    src: np.ndarray
    chunk: np.ndarray
    nbytes: np.ndarray

    @property
    def total_bytes(self) -> int:
        return int(self.nbytes.sum())


def distribution(layout: OpLayout, t: int, s: int) -> Distribution:
    """Every chunk transfer that turns input ``t``'s preload state (``s`` chunks) into its
    execute state: each core fetches the ``s - 1`` chunks it lacks from the replicas of its
    block (ranks ``b*s .. b*s + s - 1`` of the same partition)."""
    check_chunks(layout, t, s)
    empty = np.zeros(0, np.int64)
    if s == 1:
        return Distribution(empty, empty, empty, empty)
    ids, rank = replica_ranks(layout, t)
    # numbered core of (partition id, rank): replicas sorted by (id, rank)
    S = layout.replicas(t)
    by_slot = np.empty(ids.size, np.int64)
    by_slot[ids * S + rank] = np.arange(ids.size)
    mine = rank % s
    base = rank - mine
    dst, src, chunk = [], [], []
    for k in range(s):
        need = mine != k
        cores = np.flatnonzero(need)
        dst.append(cores)
        src.append(by_slot[ids[cores] * S + base[cores] + k])
        chunk.append(np.full(cores.size, k, np.int64))
    dst_a, src_a, chunk_a = (np.concatenate(v) for v in (dst, src, chunk))
    lo, hi = chunk_range(layout, t, s, chunk_a)
    nbytes = (hi - lo) * dtype_bytes(layout.expr.tensors[t].dtype)
    return Distribution(dst_a, src_a, chunk_a, nbytes)


def delivery_groups(layout: OpLayout, t: int, s: int) -> np.ndarray:
    """Per numbered core, the multicast group of its preload delivery: cores in one group
    receive the same chunk of the same partition (HBM sends it once per chip)."""
    ids, rank = replica_ranks(layout, t)
    return ids * s + rank % s


def delivered_bytes(layout: OpLayout, t: int, s: int) -> np.ndarray:
    """Per numbered core, the bytes its preload of input ``t`` writes (its chunk's real
    length): what both executors count as preloaded bytes."""
    lo, hi = chunk_range(layout, t, s, held_chunk(layout, t, s))
    return (hi - lo) * dtype_bytes(layout.expr.tensors[t].dtype)


@dataclass(frozen=True)
class OpPreload:
    """What one ``preload_async`` of an operator and its ``distribute`` move (Elk §4.5),
    the one count both executors report: ``inputs`` are the operator's off-chip inputs
    (:func:`runtime_sim.contract.stream.offchip_inputs`) with their chunk counts
    (:meth:`~runtime_sim.contract.program.OpProgram.chunks_of`).

    * ``preloaded_bytes``: the :func:`delivered_bytes` of every input over the operator's
      cores (what the preload writes into preload space);
    * ``distributed_bytes``: the :attr:`Distribution.total_bytes` of every input (what the
      cores fetch from their block peers at execute time);
    * ``space_bytes_per_core``: the preload space each of the operator's (physical) cores
      reserves from the preload until the execute: the :func:`preload_bytes` of every input.

    ``preloaded_bytes + distributed_bytes`` is every core's full partition of every input.
    """

    inputs: tuple[tuple[int, int], ...]  # (input index, chunks)
    preloaded_bytes: int
    distributed_bytes: int
    space_bytes_per_core: int


def op_preload(layout: OpLayout, inputs: "list[int] | tuple[int, ...]",
               chunks_of: "dict[int, int] | None" = None, op=None) -> OpPreload:
    """:class:`OpPreload` of an operator laid out as ``layout`` whose off-chip inputs are
    ``inputs``; chunk counts from ``op.chunks_of`` (an :class:`~runtime_sim.contract.program.OpProgram`)
    or the mapping ``chunks_of`` (missing: 1). Raises :class:`InvalidPlanError` for a chunk
    count that does not divide an input's replica count."""
    pairs = []
    for t in inputs:
        s = op.chunks_of(t) if op is not None else int((chunks_of or {}).get(t, 1))
        check_chunks(layout, t, s)
        pairs.append((int(t), int(s)))
    return OpPreload(
        inputs=tuple(pairs),
        preloaded_bytes=int(sum(int(delivered_bytes(layout, t, s).sum()) for t, s in pairs)),
        distributed_bytes=int(sum(distribution(layout, t, s).total_bytes for t, s in pairs)),
        space_bytes_per_core=int(sum(preload_bytes(layout, t, s) for t, s in pairs)),
    )


def chunk_share_per_chip(layout: OpLayout, t: int, s: int, chip_of: np.ndarray,
                         num_chips: int) -> np.ndarray:
    """Per chip, the share of its distinct partition bytes of input ``t`` that its cores hold
    in the preload state with ``s`` chunks: the distinct (partition, chunk) pairs on the chip
    over its distinct partitions (1 when every partition on it has all its chunks there).
    A chip's HBM reads its distinct bytes times this share."""
    ids, rank = replica_ranks(layout, t)
    chunk = rank % s
    lo, hi = chunk_range(layout, t, s, chunk)
    whole = layout.partition_bytes(t) // max(1, dtype_bytes(layout.expr.tensors[t].dtype))
    share = np.ones(num_chips)
    for k in np.unique(chip_of):
        on = chip_of == k
        _, first = np.unique(ids[on] * s + chunk[on], return_index=True)
        held = float((hi[on] - lo[on])[first].sum())
        full = float(np.unique(ids[on]).size * whole)
        share[int(k)] = held / full if full > 0 else 1.0
    return share


def chip_read_bytes(layout: OpLayout, t: int, s: int, chip_of: np.ndarray, num_chips: int,
                    boxes: Boxes | None = None) -> np.ndarray:
    """Per chip, the bytes its off-chip source (its HBM, its host link) sends to preload input
    ``t`` in the state with ``s`` chunks: the distinct boxes its cores need
    (:meth:`~runtime_sim.contract.relayout.Boxes.unique_bytes_per_chip`) times the chip's
    :func:`chunk_share_per_chip`. ``boxes``: the input's :func:`~runtime_sim.contract.relayout.input_boxes`
    if the caller has them."""
    boxes = input_boxes(layout, t) if boxes is None else boxes
    per_chip = boxes.unique_bytes_per_chip(chip_of, num_chips)
    return per_chip * chunk_share_per_chip(layout, t, s, chip_of, num_chips) if s > 1 else per_chip
