"""Re-layout geometry: which bytes move from which core to which when a placement changes.

Between two operators (or between an HBM tensor and its readers) a tensor is re-laid out
from the blocks its producer leaves on the cores (a :class:`BlockGrid`) into the boxes its
reader's plan needs on every core (:class:`Boxes`, from
:class:`~runtime_sim.contract.layout.OpLayout`). :func:`relayout` intersects the two and
says, per destination core, which distinct boxes it receives from which source cores
(:class:`Relayout`); :func:`relayout_flows` lists the transfers when a network needs them
one by one. Gathered reads (embedding lookups) re-lay out the rows their ids pick
(:func:`gather_relayout`). The functional device moves these bytes; the timing simulator
and the compiler's cost models price the same geometry (:mod:`runtime_sim.machine.topology`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from runtime_sim.contract.expr import TensorExpr, dtype_bytes
from runtime_sim.contract.layout import OpLayout


# -- placement grids (where a tensor sits between operators; read by the compiler too) -----
@dataclass(frozen=True)
class BlockGrid:
    """A tensor stored as blocks ``[k*block, (k+1)*block)`` per dimension, block ``k`` on
    physical core ``owner[ravel(k)]`` (``counts`` blocks per dimension)."""

    shape: tuple[int, ...]
    block: tuple[int, ...]
    counts: tuple[int, ...]
    owner: np.ndarray  # flat, row-major over ``counts``; -1 where no core holds the block
    itemsize: int


def producer_grid(layout: OpLayout) -> BlockGrid:
    """Where a producer's output is once its steps and replica reduction are done.

    Every tensor is back in its initial placement after the last step (the final wrap of
    every loop, :mod:`runtime_sim.contract.layout`), and ring 0 holds the reduced output.
    """
    grid = _block_grid(layout, len(layout.expr.tensors) - 1, layout.owners())
    assert grid is not None  # an output's index is simple on every dimension
    return grid


def placement_grid(layout: OpLayout, t: int) -> BlockGrid | None:
    """Where tensor ``t`` sits while its operator is idle in ``layout`` (T10 §4.3.2): the
    initial placement, each block taken from the lowest core that holds it (replicas of a
    sub-tensor hold equal blocks). ``None`` when the partitions are not aligned blocks (a
    compound index, e.g. a convolution's input window)."""
    return _block_grid(layout, t, np.arange(layout.num_cores))


def _block_grid(layout: OpLayout, t: int, cores: np.ndarray) -> BlockGrid | None:
    access = layout.expr.tensors[t]
    if getattr(access, "gather", None) is not None:
        return None  # its partitions are rows picked by data, not blocks of the tensor
    shape = tuple(int(s) for s in access.shape)
    itemsize = dtype_bytes(access.dtype)
    cores = np.asarray(cores, np.int64)
    if not shape:
        return BlockGrid((), (), (), layout.physical[cores[:1]], itemsize)
    starts = layout.partition_start(t, layout.partition(t, layout.chunk({})))
    block = tuple(max(int(b), 1) for b in layout.partition_shape(t))
    ks = []
    for d, length in enumerate(block):
        start = np.broadcast_to(np.asarray(starts[d], np.int64), (layout.num_cores,))[cores]
        if np.any(start % length):
            return None
        ks.append(np.maximum(start // length, 0))
    counts = tuple(max(math.ceil(shape[d] / block[d]), int(ks[d].max()) + 1) for d in range(len(shape)))
    flat = np.ravel_multi_index(tuple(ks), counts)
    blocks, first = np.unique(flat, return_index=True)
    owner = np.full(int(np.prod(counts)), -1, np.int64)
    owner[blocks] = layout.physical[cores[first]]
    return BlockGrid(shape, block, counts, owner, itemsize)


def canonical_grid(shape: tuple[int, ...], itemsize: int, num_cores: int) -> BlockGrid:
    """An on-chip tensor of unknown origin (another region's output): near-square blocks,
    one per core in row-major order -- the shape a 2D-partitioned producer leaves.

    The prime factors of the core count go, largest first, to the dimension whose blocks are
    currently longest (as long as it can still be split).
    """
    counts = [1] * len(shape)
    for p in _prime_factors(num_cores)[::-1]:
        splittable = [d for d in range(len(shape)) if counts[d] * p <= shape[d]]
        if not splittable:
            continue
        d = max(splittable, key=lambda d: (math.ceil(shape[d] / counts[d]), -d))
        counts[d] *= p
    block = [max(1, math.ceil(s / c)) if s else 1 for s, c in zip(shape, counts)]
    counts = [max(1, math.ceil(s / b)) for s, b in zip(shape, block)]
    total = int(np.prod(counts)) if counts else 1
    return BlockGrid(tuple(shape), tuple(block), tuple(counts), np.arange(total, dtype=np.int64), itemsize)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


# -- where a tensor must be, and which bytes a re-layout moves (runtime_sim.contract.relayout
#    describes these; they live here because the compiler's mapping cost reads them too) --
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
    #: cores that need the tensor at all (``None``: every core); see :meth:`placed`
    present: np.ndarray | None = None

    @property
    def num_cores(self) -> int:
        return int(self.lo.shape[0])

    @property
    def nbytes(self) -> np.ndarray:
        """Bytes of real data each core needs (0 for a box entirely in the padding)."""
        if not self.shape:
            need = np.full(self.num_cores, self.itemsize, np.int64)
        else:
            need = np.prod(np.maximum(self.hi - self.lo, 0), axis=1) * self.itemsize
        return need if self.present is None else np.where(self.present, need, 0)

    def placed(self, physical: np.ndarray, span: int) -> "Boxes":
        """The same boxes indexed by physical core (``physical[i]`` is numbered core ``i``'s),
        over cores ``0 .. span - 1``; cores outside the plan need nothing."""
        physical = np.asarray(physical, np.int64)
        if physical.size == span and np.array_equal(physical, np.arange(span)):
            return self
        D = self.lo.shape[1]
        lo = np.zeros((span, D), np.int64)
        hi = np.zeros((span, D), np.int64)
        lo[physical], hi[physical] = self.lo, self.hi
        present = np.zeros(span, bool)
        present[physical] = True if self.present is None else self.present
        return Boxes(lo, hi, self.shape, self.itemsize, present)

    def unique_bytes_per_chip(self, chip_of_core: np.ndarray, num_chips: int) -> np.ndarray:
        """Bytes of distinct boxes needed on each chip: what an off-chip source must send once.

        Replicas of a box (cores sharing a sub-tensor, T10 §4.2) count once per chip; boxes
        that overlap without being equal (convolution halos) are counted in full, a small
        over-estimate.
        """
        chip = chip_of_core[: self.num_cores]
        need = self.nbytes
        keep = need > 0
        if not keep.any():
            return np.zeros(num_chips)
        # distinct (chip, box) rows in lexicographic order, each at its first occurrence:
        # np.unique(rows, axis=0, return_index=True) on one mixed-radix id per row (_row_ids
        # keeps the rows' order), far cheaper than numpy's sort of row records
        chips, lo, hi = chip[keep], self.lo[keep], self.hi[keep]
        bound = np.asarray(self.shape, np.int64)
        if lo.size and (lo.min() < 0 or (hi > bound).any()):  # outside the radices: numpy's
            _, first = np.unique(np.concatenate([chips[:, None], lo, hi], axis=1), axis=0,
                                 return_index=True)
        else:
            radices = [int(chips.max()) + 1] + [s + 1 for s in self.shape] * 2
            _, first = np.unique(_row_ids([chips, *lo.T, *hi.T], radices), return_index=True)
        return np.bincount(chips[first], weights=need[keep][first].astype(np.float64),
                           minlength=num_chips)


def input_boxes(layout: OpLayout, t: int) -> Boxes:
    """The box of input ``t`` each core of ``layout`` holds at its first step.

    For a gathered input (:class:`~runtime_sim.contract.expr.Gather`) the box is in the gathered
    view: its bytes are the table rows the core receives, whatever the ids (an off-chip
    source reads only those rows, not the whole table); :func:`gather_relayout` says where
    they come from on chip. A viewed input's boxes are in its region tensor's coordinates
    (:class:`~runtime_sim.contract.expr.TensorView`): where its block sits there."""
    access = layout.expr.tensors[t]
    shape = tuple(int(s) for s in layout.expr.access_shape(t))
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
    hi = np.maximum(np.clip(start + length, 0, limit), lo)
    view = getattr(access, "view", None)
    if view is not None:  # a block of a larger tensor: boxes in the region tensor's coordinates
        origin = np.asarray(view.start, np.int64)[None, :]
        return Boxes(lo + origin, hi + origin, tuple(view.base_shape), dtype_bytes(access.dtype))
    return Boxes(lo, hi, shape, dtype_bytes(access.dtype))


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

    def inter_chip_bytes(self, cores_per_chip: int) -> float:
        """Bytes that cross chips: every piece once per chip, other than its owner's, whose
        cores receive it (the multicast a chip-to-chip link carries once)."""
        foreign = self.piece_receivers > 0
        live = np.flatnonzero(self.piece_src >= 0)
        foreign[live, self.piece_src[live] // cores_per_chip] = False
        return float((self.piece_bytes * foreign.sum(axis=1)).sum()) * self.box_weight

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


def _distinct_boxes(boxes: Boxes, cores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(box_of_core, lo, hi)``: the distinct boxes of ``cores`` (replicas of a sub-tensor
    need the same bytes) and, per core, the index of its box (-1 for the other cores)."""
    box_of_core = np.full(boxes.num_cores, -1, np.int64)
    D = len(boxes.shape)
    cols = [boxes.lo[cores, d] for d in range(D)] + [boxes.hi[cores, d] for d in range(D)]
    keys = _row_ids(cols, [s + 1 for s in boxes.shape] * 2) if D else np.zeros(cores.size, np.int64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    box_of_core[cores] = inverse.reshape(-1)
    return box_of_core, boxes.lo[cores[first]], boxes.hi[cores[first]]


def relayout(grid: BlockGrid, boxes: Boxes, chip_of_core: np.ndarray, num_chips: int,
             max_pairs: int = MAX_PAIRS) -> Relayout:
    """Who sends what to whom so that every consumer core holds its box (see module doc)."""
    n = boxes.num_cores
    need = boxes.nbytes.astype(np.float64)
    cores = np.flatnonzero(need > 0)
    chip = chip_of_core[:n]
    D = len(boxes.shape)
    box_of_core, lo, hi = _distinct_boxes(boxes, cores)
    U = len(lo)
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


# -- gathered inputs (embedding lookups): rows picked by data -----------------------------------
def rests_spread(expr: TensorExpr, t: int) -> bool:
    """Whether resident input ``t`` of ``expr`` idles spread over all cores whatever the
    operator's idle plan: a gathered table (its plan holds rows picked by this call's ids,
    not the table)."""
    return t < len(expr.inputs) and expr.inputs[t].gather is not None


def gather_relayout(grid: BlockGrid, boxes: Boxes, axis: int, chip_of_core: np.ndarray,
                    num_chips: int, rows: np.ndarray | None = None) -> Relayout:
    """Who sends which table rows to whom so that every core holds its block of a gathered
    view (:class:`~runtime_sim.contract.expr.Gather`): the data movement of an embedding lookup.

    ``grid`` is where the table sits (its own shape), ``boxes`` the view boxes of the
    consumer cores (:func:`input_boxes` placed on physical cores), ``axis`` the gathered
    dimension of the table. A core whose box covers ids positions ``P`` and the ranges ``W``
    of the other dimensions receives, for every position ``p`` in ``P``, row ``rows[p]`` over
    ``W`` from the cores owning those blocks; the part it owns itself does not move. Every
    position is counted (a row read twice by one core travels twice: no deduplication).

    ``rows`` (the ids resolved by :func:`~runtime_sim.contract.expr.gather_rows`, shaped like the
    ids) makes the count exact: the functional device passes the ids of the call. Without
    them (timing only: ids are data), each position is a uniformly random row of the table,
    and every count is its expectation: a row block ``k`` of ``b_k`` rows out of ``n`` sends
    ``|P| * b_k / n`` rows' worth of bytes to every core. The two agree exactly when each
    core's ids fall evenly on the table's row blocks.
    """
    n = boxes.num_cores
    D = len(grid.shape)
    k = len(boxes.shape) - D + 1  # ids dimensions standing for the gathered one
    need = boxes.nbytes.astype(np.float64)
    cores = np.flatnonzero(need > 0)
    chip = chip_of_core[:n]
    box_of_core, lo, hi = _distinct_boxes(boxes, cores)
    U = len(lo)
    block = np.asarray(grid.block, np.int64)
    n_rows = int(grid.shape[axis])
    kb = int(grid.counts[axis])
    row_block = np.minimum((np.arange(kb) + 1) * block[axis], n_rows) - np.arange(kb) * block[axis]
    # rows per (distinct box, row block of the table): counted from the ids, or expected
    hist = np.zeros((U, kb))
    positions = np.prod(hi[:, axis:axis + k] - lo[:, axis:axis + k], axis=1) if U else np.zeros(0)
    if rows is None:
        hist[:] = positions[:, None] * (np.maximum(row_block, 0) / n_rows)[None, :]
    else:
        rows = np.asarray(rows, np.int64)
        for u in range(U):
            window = rows[tuple(slice(int(a), int(b)) for a, b in
                                zip(lo[u, axis:axis + k], hi[u, axis:axis + k]))]
            hist[u] = np.bincount(window.reshape(-1) // block[axis], minlength=kb)[:kb]
    # the other dimensions: the view box's ranges against the table's blocks
    other = [d for d in range(D) if d != axis]
    view_dim = {d: (d if d < axis else d + k - 1) for d in other}
    u_idx, b_idx = np.nonzero(hist)
    weight = hist[u_idx, b_idx]
    ks = {axis: b_idx}
    elems = np.ones(u_idx.size)
    for d in other:
        v = view_dim[d]
        klo, khi = lo[u_idx, v] // block[d], (hi[u_idx, v] - 1) // block[d]
        width = khi - klo + 1
        rep = np.repeat(np.arange(u_idx.size), width)
        offs = np.arange(rep.size) - np.repeat(np.cumsum(width) - width, width)
        kd = klo[rep] + offs
        start = np.maximum(lo[u_idx[rep], v], kd * block[d])
        stop = np.minimum(hi[u_idx[rep], v], (kd + 1) * block[d])
        u_idx, b_idx, weight = u_idx[rep], b_idx[rep], weight[rep]
        elems = elems[rep] * (stop - start)
        ks = {a: arr[rep] for a, arr in ks.items()}
        ks[d] = kd
    src = grid.owner[np.ravel_multi_index(tuple(ks[d] for d in range(D)), grid.counts)] \
        if D else grid.owner[:1].repeat(u_idx.size)
    nbytes = weight * elems * boxes.itemsize
    # one pair per (distinct box, source core): the rows that core sends to those boxes
    key = u_idx * (int(grid.owner.max()) + 2) + (src + 1)
    uniq, first_p, inv = np.unique(key, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    pair_box, pair_src = u_idx[first_p], src[first_p]
    pair_bytes = np.bincount(inv, weights=nbytes, minlength=uniq.size)
    # what a core holds itself: the rows of its own box that it owns
    own = np.zeros(n)
    src_in = (pair_src >= 0) & (pair_src < n)
    self_pair = np.zeros(pair_src.size, bool)
    self_pair[src_in] = box_of_core[pair_src[src_in]] == pair_box[src_in]
    np.add.at(own, pair_src[self_pair], pair_bytes[self_pair])
    per_box_chip = np.bincount(box_of_core[cores] * num_chips + chip[cores],
                               minlength=U * num_chips).reshape(U, num_chips).astype(np.float64)
    receivers = per_box_chip[pair_box]
    if self_pair.any():
        receivers[np.flatnonzero(self_pair), chip[pair_src[self_pair]]] -= 1
    return Relayout(
        num_cores=n, box_of_core=box_of_core, pair_box=pair_box, pair_src=pair_src,
        pair_bytes=pair_bytes, pair_piece=np.arange(pair_box.size), piece_src=pair_src,
        piece_bytes=pair_bytes, piece_receivers=receivers, recv_bytes=need - own,
        local_bytes=float(own.sum()), box_weight=1.0,
    )


def input_relayout(grid: BlockGrid, layout: OpLayout, t: int, chip_of_core: np.ndarray,
                   num_chips: int, rows: np.ndarray | None = None,
                   boxes: Boxes | None = None) -> Relayout:
    """The re-layout that brings input ``t`` of ``layout`` from ``grid`` onto its cores: box
    overlaps (:func:`relayout`), or for a gathered input the rows its ids pick
    (:func:`gather_relayout`, exact with ``rows``, else the uniform estimate). ``boxes``: the
    input's :func:`input_boxes` on physical cores, when the caller has them."""
    if boxes is None:
        boxes = input_boxes(layout, t).placed(layout.physical, layout.span)
    g = layout.expr.tensors[t].gather if t < len(layout.expr.inputs) else None
    if g is None:
        return relayout(grid, boxes, chip_of_core, num_chips)
    return gather_relayout(grid, boxes, g.axis, chip_of_core, num_chips, rows)


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
