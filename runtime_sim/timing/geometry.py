"""Where tensor data sits on the cores, and which bytes a change of layout moves where.

Two descriptions, both computed for all cores at once:

* :class:`Boxes` -- what an operator needs on each core before its first step: the box (a
  range per tensor dimension, clipped to the tensor) of the input partition the core holds in
  its initial placement (T10 §4.4 "Sub-tensor placement"; :meth:`OpLayout.partition_start`).
  Halos of compound indices (a convolution window) are part of the box; padding outside the
  tensor is not data and moves nowhere.
* :class:`~runtime_sim.layout.BlockGrid` -- where a tensor already is (part of the layout
  contract, :mod:`runtime_sim.layout`, which the compiler reads too): a regular grid of blocks, each held by one
  core. A producer's output after its replica reduction is such a grid (each ring-0 core owns
  one output partition, :meth:`OpLayout.owners`); so is the canonical layout assumed for a
  region input that is already on chip but whose producer is unknown (another region).

A re-layout (T10 §5: "the program may rearrange the data on cores") sends each consumer core
the bytes of its box that it does not hold itself, from the cores that own them. The
overlap of a box with the grid's blocks is exact (per dimension interval intersections), and
computed once per *distinct* box: replicas of a sub-tensor (T10 §4.2) need the same bytes, so
the same (owner, piece) data goes to all of them -- a multicast the all-to-all exchange sends
once (:meth:`Topology.multicast_phase`). Explicit per-destination flows, numbered by piece
(for the mesh, which routes each piece as an XY multicast tree) are listed on demand; beyond ``max_pairs`` (owner, consumer) pairs a uniform
stride sample of the destinations stands for all of them (:meth:`Topology.phase`
``sample_weight``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..layout import (  # noqa: F401  (placement grids: the layout contract, re-exported)
    BlockGrid,
    OpLayout,
    canonical_grid,
    placement_grid,
    producer_grid,
)
from ..program import dtype_bytes

#: (owner, consumer) pairs above which a re-layout is estimated from a sample of consumers.
#: Chosen so that one re-layout stays within ~0.1 s of numpy work in the worst case.
MAX_PAIRS = 500_000


@dataclass(frozen=True)
class Boxes:
    """Per core, the half-open box ``[lo, hi)`` of a tensor it needs (``[cores, dims]``)."""

    lo: np.ndarray
    hi: np.ndarray
    shape: tuple[int, ...]
    itemsize: int

    @property
    def num_cores(self) -> int:
        return int(self.lo.shape[0])

    @property
    def nbytes(self) -> np.ndarray:
        """Bytes of real data each core needs (0 for a box entirely in the padding)."""
        if not self.shape:
            return np.full(self.num_cores, self.itemsize, np.int64)
        return np.prod(np.maximum(self.hi - self.lo, 0), axis=1) * self.itemsize

    def unique_bytes_per_chip(self, chip_of_core: np.ndarray, num_chips: int) -> np.ndarray:
        """Bytes of distinct boxes needed on each chip: what an off-chip source must send once.

        Replicas of a box (cores sharing a sub-tensor, T10 §4.2) count once per chip; boxes
        that overlap without being equal (convolution halos) are counted in full, a small
        over-estimate.
        """
        chip = chip_of_core[: self.num_cores]
        need = self.nbytes
        keep = need > 0
        rows = np.concatenate([chip[:, None], self.lo, self.hi], axis=1)[keep]
        if rows.size == 0:
            return np.zeros(num_chips)
        uniq, first = np.unique(rows, axis=0, return_index=True)
        return np.bincount(uniq[:, 0], weights=need[keep][first].astype(np.float64), minlength=num_chips)


def input_boxes(layout: OpLayout, t: int) -> Boxes:
    """The box of input ``t`` each core of ``layout`` holds at its first step."""
    access = layout.expr.tensors[t]
    shape = tuple(int(s) for s in access.shape)
    n = layout.num_cores
    starts = layout.partition_start(t, layout.partition(t, layout.chunk({})))
    pshape = layout.partition_shape(t)
    if not shape:
        empty = np.zeros((n, 0), np.int64)
        return Boxes(empty, empty, shape, dtype_bytes(access.dtype))
    start = np.stack([np.broadcast_to(np.asarray(s, np.int64), (n,)) for s in starts], axis=1)
    length = np.asarray(pshape, np.int64)[None, :]
    limit = np.asarray(shape, np.int64)[None, :]
    lo = np.clip(start, 0, limit)
    hi = np.clip(start + length, 0, limit)
    return Boxes(lo, np.maximum(hi, lo), shape, dtype_bytes(access.dtype))


@dataclass(frozen=True)
class Flows:
    """Point-to-point transfers (``src[i] -> dst[i]``, ``nbytes[i]`` bytes).

    ``sample_weight`` > 1 when only a stride sample of the destinations is listed.
    ``multicast[i]`` numbers the bytes a flow carries (equal: same bytes, same source).
    """

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    sample_weight: float = 1.0
    multicast: np.ndarray | None = None


@dataclass(frozen=True)
class Relayout:
    """A re-layout, aggregated: consumer cores with equal boxes (replicas) share their pairs.

    ``pair_*`` list, per distinct consumer box ``u``, the (owner block, bytes) overlaps;
    ``recv_bytes`` is exact per core (its box minus what it owns itself); pieces are the
    distinct (owner, overlap box) data, each with its receivers per chip.
    """

    num_cores: int
    box_of_core: np.ndarray  # [cores] distinct-box index, -1 when the core needs nothing
    pair_box: np.ndarray
    pair_src: np.ndarray
    pair_bytes: np.ndarray
    pair_piece: np.ndarray
    piece_src: np.ndarray
    piece_bytes: np.ndarray
    piece_receivers: np.ndarray  # [pieces, chips]: receivers other than the owner itself
    recv_bytes: np.ndarray  # [cores]
    local_bytes: float
    box_weight: float  # > 1 when the distinct boxes were sampled (pair lists of a sample)

    @property
    def moved_bytes(self) -> float:
        return float(self.recv_bytes.sum())

    def flows(self, max_pairs: int = MAX_PAIRS) -> Flows:
        """Explicit per-destination flows (a stride sample of destinations beyond ``max_pairs``)."""
        cores = np.flatnonzero(self.box_of_core >= 0)
        order = np.argsort(self.pair_box, kind="stable")
        n_boxes = int(self.box_of_core.max()) + 1 if cores.size else 0
        per_box = np.bincount(self.pair_box, minlength=n_boxes)
        first = np.cumsum(per_box) - per_box
        count = per_box[self.box_of_core[cores]] if cores.size else np.zeros(0, np.int64)
        weight = self.box_weight
        total = int(count.sum())
        if total > max_pairs:
            stride = math.ceil(total / max_pairs)
            pick = np.arange(0, cores.size, stride)
            weight *= cores.size / pick.size
            cores, count = cores[pick], count[pick]
            total = int(count.sum())
        row = np.repeat(np.arange(cores.size), count)
        offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        pair = order[first[self.box_of_core[cores]][row] + offs]
        dst = cores[row]
        src = self.pair_src[pair]
        keep = src != dst
        return Flows(src[keep], dst[keep], self.pair_bytes[pair][keep], weight,
                     self.pair_piece[pair][keep])


def relayout(grid: BlockGrid, boxes: Boxes, chip_of_core: np.ndarray, num_chips: int,
             max_pairs: int = MAX_PAIRS) -> Relayout:
    """Who sends what to whom so that every consumer core holds its box (see module doc)."""
    n = boxes.num_cores
    need = boxes.nbytes.astype(np.float64)
    cores = np.flatnonzero(need > 0)
    chip = chip_of_core[:n]
    box_of_core = np.full(n, -1, np.int64)
    D = len(boxes.shape)
    # distinct boxes: replicas of a sub-tensor need the same bytes
    cols = [boxes.lo[cores, d] for d in range(D)] + [boxes.hi[cores, d] for d in range(D)]
    keys = _row_ids(cols, [s + 1 for s in boxes.shape] * 2) if D else np.zeros(cores.size, np.int64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    box_of_core[cores] = inverse.reshape(-1)
    lo, hi = boxes.lo[cores[first]], boxes.hi[cores[first]]
    U = first.size
    block = np.asarray(grid.block, np.int64)

    # what each core already holds: the overlap of its box with the block it owns
    own = np.zeros(n)
    valid = np.flatnonzero(grid.owner >= 0)
    owner_cores = grid.owner[valid]
    mine = owner_cores < n
    block_of = np.full(n, -1, np.int64)
    block_of[owner_cores[mine]] = valid[mine]
    holders = np.flatnonzero((block_of >= 0) & (need > 0))
    if holders.size:
        ks = np.unravel_index(block_of[holders], grid.counts) if D else ()
        ov = np.ones(holders.size)
        for d in range(D):
            start = np.maximum(boxes.lo[holders, d], ks[d] * block[d])
            stop = np.minimum(boxes.hi[holders, d], (ks[d] + 1) * block[d])
            ov *= np.maximum(stop - start, 0)
        own[holders] = ov * boxes.itemsize
    recv = need - own

    # pairs (distinct box, owner block) with their overlap box
    weight = 1.0
    if D:
        klo, khi = lo // block, (hi - 1) // block
        width = khi - klo + 1
        count = np.prod(width, axis=1)
        boxes_kept = np.arange(U)
        if int(count.sum()) > max_pairs:  # a stride sample of the distinct boxes
            stride = math.ceil(int(count.sum()) / max_pairs)
            boxes_kept = np.arange(0, U, stride)
            weight = U / boxes_kept.size
        cnt = count[boxes_kept]
        total = int(cnt.sum())
        row = np.repeat(boxes_kept, cnt)
        offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        nbytes = np.full(total, float(boxes.itemsize))
        ks, piece_cols = [None] * D, []
        for d in range(D - 1, -1, -1):
            w = width[row, d]
            k = klo[row, d] + offs % w
            offs //= w
            start = np.maximum(lo[row, d], k * block[d])
            stop = np.minimum(hi[row, d], (k + 1) * block[d])
            nbytes *= stop - start
            ks[d] = k
            piece_cols += [start, stop]
        src = grid.owner[np.ravel_multi_index(tuple(ks), grid.counts)]
        radices = [int(grid.owner.max()) + 1] + [s + 1 for s in boxes.shape for _ in (0, 1)]
        piece_key = _row_ids([src] + piece_cols, radices)
    else:
        row = np.zeros(min(U, 1), np.int64)
        src = grid.owner[:1].repeat(row.size)
        nbytes = np.full(row.size, float(boxes.itemsize))
        piece_key = src.copy()
    _, piece_first, pair_piece = np.unique(piece_key, return_index=True, return_inverse=True)
    pair_piece = pair_piece.reshape(-1)

    # receivers of each pair per chip: the cores with that box, but not the owner itself
    per_box_chip = np.bincount(box_of_core[cores] * num_chips + chip[cores],
                               minlength=U * num_chips).reshape(U, num_chips).astype(np.float64)
    receivers = per_box_chip[row]
    src_in = src < n
    self_rx = np.zeros(row.size, bool)
    self_rx[src_in] = box_of_core[src[src_in]] == row[src_in]
    if self_rx.any():
        receivers[np.flatnonzero(self_rx), chip[src[self_rx]]] -= 1
    piece_rx = np.stack([np.bincount(pair_piece, weights=receivers[:, k], minlength=piece_first.size)
                         for k in range(num_chips)], axis=1)
    return Relayout(
        num_cores=n, box_of_core=box_of_core, pair_box=row, pair_src=src, pair_bytes=nbytes,
        pair_piece=pair_piece, piece_src=src[piece_first], piece_bytes=nbytes[piece_first],
        piece_receivers=piece_rx, recv_bytes=recv, local_bytes=float(own.sum()),
        box_weight=weight,
    )


def relayout_flows(grid: BlockGrid, boxes: Boxes, max_pairs: int = MAX_PAIRS) -> Flows:
    """Explicit per-destination transfers of a re-layout onto one chip's worth of cores."""
    chips = np.zeros(boxes.num_cores, np.int64)
    return relayout(grid, boxes, chips, 1, max_pairs).flows(max_pairs)


def _row_ids(columns: list[np.ndarray], radices: list[int]) -> np.ndarray:
    """Equal ids for equal rows of ``columns`` (values below ``radices``).

    The row is read as a mixed-radix number; when that would overflow int64 the partial key
    is first renumbered densely (``np.unique``), which keeps it exact.
    """
    if not columns or columns[0].size == 0:
        return np.zeros(0, np.int64)
    key = np.zeros(columns[0].size, np.int64)
    span = 1  # key < span
    for col, radix in zip(columns, radices):
        if span * radix >= 2 ** 62:
            uniq, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1).astype(np.int64)
            span = max(int(uniq.size), 1)
        key = key * radix + col
        span *= radix
    return key
