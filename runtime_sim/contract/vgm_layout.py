"""What a VGM plan means on the cores: home slices and tiles (T10 §2.2, Fig. 2a).

Compilers that mimic a shared memory on an ICCA chip reserve part of every core's SRAM as a
*virtual global memory*: every tensor is spread linearly over all cores (its home slices),
the running operator is cut into tiles, and each core loads its tiles' inputs from their
home cores, computes, and stores its output tile home (keeping the boxes it already holds
under a ``reuse`` plan; a box several cores read in one phase can be multicast by its home
core). :class:`VgmLayout` is that geometry
for one operator and :class:`~runtime_sim.contract.plan.VgmPlan`; the functions below size
the home slices of a region. The functional device executes it
(:mod:`runtime_sim.functional.vgm_exec`) and the timing simulator times it
(:mod:`runtime_sim.timing.vgm_timing`).
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError
from runtime_sim.contract.expr import AffineIndex, TensorExpr, dtype_bytes
from runtime_sim.contract.plan import VgmPlan


class VgmLayout:
    """Tiles, waves and home slices of one operator under a VGM plan."""

    def __init__(self, expr: TensorExpr, plan: VgmPlan, num_cores: int):
        self.expr = expr
        self.plan = plan
        self.num_cores = int(num_cores)
        self.tile = {a.name: plan.tile(a.name, a.extent) for a in expr.axes}
        self.count = {a.name: math.ceil(a.extent / self.tile[a.name]) for a in expr.axes}
        self.spatial = tuple(a.name for a in expr.axes if not a.reduce)
        self.reduce = tuple(a.name for a in expr.axes if a.reduce)
        self.num_tiles = math.prod(self.count[a] for a in self.spatial)
        self.num_chunks = math.prod(self.count[a] for a in self.reduce)
        self.waves = math.ceil(self.num_tiles / self.num_cores)
        self.extent = {a.name: a.extent for a in expr.axes}
        self.local_extent = {a.name: a.extent for a in expr.local_axes}
        self.order = tuple(plan.order) or self.spatial
        if sorted(self.order) != sorted(self.spatial):
            raise DeviceProgramError(f"VGM plan: tile order {list(self.order)} is not an order of the "
                                     f"spatial axes {list(self.spatial)}")
        self.reuse = bool(plan.reuse)

    # -- memory -------------------------------------------------------------------------
    def home_slice_bytes(self, t: int) -> int:
        """Bytes of tensor ``t`` homed on each core (linear mapping over all cores)."""
        access = self.expr.tensors[t]
        return home_slice_bytes(access.shape, access.dtype, self.num_cores)

    def vgm_bytes_per_core(self) -> int:
        """The VGM region of this operator alone: a home slice of each of its tensors."""
        return home_bytes([(a.shape, a.dtype) for a in self.expr.tensors], self.num_cores)

    def tile_box(self, t: int, lo: dict[str, int], hi: dict[str, int]) -> list[tuple[int, int]]:
        """Index range per dimension of tensor ``t`` read (or written) by one tile chunk."""
        access = self.expr.tensors[t]
        box = []
        for d, idx in enumerate(access.indices):
            box.append(index_range(idx, lo, hi, self.local_extent, access.shape[d]))
        return box

    def working_bytes_per_core(self) -> int:
        """Sub-operator memory: one chunk of every input tile plus the output tile."""
        lo = {a: 0 for a in self.extent}
        hi = {a: self.tile[a] for a in self.extent}
        total = 0
        for t, access in enumerate(self.expr.tensors):
            box = self.tile_box(t, lo, hi)
            total += math.prod(max(e - s, 0) for s, e in box) * dtype_bytes(access.dtype)
        return total

    def memory_bytes_per_core(self) -> int:
        return self.vgm_bytes_per_core() + self.working_bytes_per_core()

    # -- traffic ------------------------------------------------------------------------
    def tile_origins(self, wave: int) -> dict[str, np.ndarray]:
        """Origins, per spatial axis, of the tiles of ``wave``; the ``n``-th runs on core ``n``.

        Tiles are numbered row-major over :attr:`order`. Round-robin (``reuse`` off): wave
        ``w`` runs tiles ``w * cores ...``, one per core. Blocked (``reuse`` on): core ``c``
        runs tiles ``c * waves + w`` in turn, so consecutive waves of a core are neighbours
        along the innermost axis of the order (and share the boxes of the inputs that do not
        depend on it, Roller §3.2).
        """
        if self.reuse:
            tiles = wave + self.waves * np.arange(self.num_cores, dtype=np.int64)
            tiles = tiles[tiles < self.num_tiles]
        else:
            first = wave * self.num_cores
            tiles = np.arange(first, min(self.num_tiles, first + self.num_cores), dtype=np.int64)
        shape = [self.count[a] for a in self.order]
        idx = np.unravel_index(tiles, shape) if shape else ()
        origins = {a: np.asarray(j, np.int64) * self.tile[a] for a, j in zip(self.order, idx)}
        origins["_n"] = np.arange(tiles.size)
        return origins

    def reuse_run(self, t: int) -> int:
        """Consecutive tiles of one core (blocked assignment) that read the same box of input
        ``t``: the product of the tile counts of the innermost axes of :attr:`order` that no
        index of ``t`` uses (1 when ``reuse`` is off)."""
        if not self.reuse:
            return 1
        used = {a for idx in self.expr.tensors[t].indices for a in idx.axes}
        run = 1
        for a in reversed(self.order):
            if a in used:
                break
            run *= self.count[a]
        return run

    def chunk_dependent(self, t: int) -> bool:
        """Whether the box of tensor ``t`` changes from one reduction chunk to the next."""
        used = {a for idx in self.expr.tensors[t].indices for a in idx.axes}
        return any(self.count[a] > 1 and a not in self.local_extent for a in self.reduce if a in used)

    def chunk_origins(self) -> Iterator[dict[str, int]]:
        shape = [self.count[a] for a in self.reduce]
        for i in range(self.num_chunks):
            idx = np.unravel_index(i, shape) if shape else ()
            yield {a: int(j) * self.tile[a] for a, j in zip(self.reduce, idx)}

    def traffic(self, tensors: list[int], origins: dict[str, np.ndarray], chunk: dict[str, int],
                held: dict[int, np.ndarray] | None = None, multicast: bool = False):
        """Bytes each core moves for one chunk of one wave: (per tile core, per home core).

        ``held`` (plans with ``reuse``): per input, the box each core holds from its previous
        fetch (``[cores, 2 * dims]``, starts then ends; updated here). A core whose box is the
        one it holds fetches nothing for that input. ``multicast``: a home core sends a box
        that several cores read in the same phase once (the IPU's exchange delivers one send
        to every receiving core; the all-to-all topology of :mod:`runtime_sim.machine.topology`
        charges broadcasts the same way); otherwise once per reader.

        Tiles are handled as arrays; the per-home-core split is computed once per distinct
        box a wave reads, weighted by how many tiles read it (1 with ``multicast``).
        """
        n = origins["_n"].size
        tile_bytes = np.zeros(self.num_cores, np.int64)
        home_bytes = np.zeros(self.num_cores, np.int64)
        lo = {a: np.broadcast_to(np.asarray(origins[a] if a in origins else chunk.get(a, 0)), (n,))
              for a in self.extent}
        hi = {a: np.minimum(lo[a] + self.tile[a], self.extent[a]) for a in self.extent}
        for t in tensors:
            access = self.expr.tensors[t]
            item = dtype_bytes(access.dtype)
            slice_elems = math.ceil(math.prod(access.shape) / self.num_cores)
            ranges = [index_ranges(idx, lo, hi, self.local_extent, access.shape[d], n)
                      for d, idx in enumerate(access.indices)]
            dims = len(ranges)
            starts = np.stack([r[0] for r in ranges], axis=1) if ranges else np.zeros((n, 0), np.int64)
            ends = np.stack([r[1] for r in ranges], axis=1) if ranges else np.zeros((n, 0), np.int64)
            fetch = np.ones(n, bool)
            if held is not None:
                box = np.concatenate([starts, ends], axis=1)
                prev = held.get(t)
                if prev is None:
                    prev = held[t] = np.full((self.num_cores, 2 * dims), -1, np.int64)
                else:
                    fetch = np.any(prev[:n] != box, axis=1)
                prev[:n][fetch] = box[fetch]
            if not ranges:  # a scalar: every tile reads its one element from core 0
                tile_bytes[:n] += item * fetch
                home_bytes[0] += item * (min(int(fetch.sum()), 1) if multicast else int(fetch.sum()))
                continue
            tile_bytes[:n] += np.prod(np.maximum(ends - starts, 0), axis=1) * item * fetch
            if not fetch.any():
                continue
            boxes, readers = np.unique(np.concatenate([starts[fetch], ends[fetch]], axis=1), axis=0,
                                       return_counts=True)
            if multicast:
                readers = np.ones_like(readers)
            home_bytes += item * home_counts_many(boxes[:, :dims], boxes[:, dims:], readers,
                                                  access.shape, slice_elems, self.num_cores)
        return tile_bytes, home_bytes


def index_ranges(idx: AffineIndex, lo: dict[str, np.ndarray], hi: dict[str, np.ndarray],
                  local: dict[str, int], size: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`index_range` for ``n`` tiles at once (arrays of starts and ends)."""
    if any(a in local for a in idx.axes):
        return np.zeros(n, np.int64), np.full(n, size, np.int64)
    start = np.full(n, idx.offset, np.int64)
    end = np.full(n, idx.offset, np.int64)
    for a, c in idx.terms:
        if c >= 0:
            start = start + c * lo[a]
            end = end + c * (hi[a] - 1)
        else:
            start = start + c * (hi[a] - 1)
            end = end + c * lo[a]
    return np.maximum(start, 0), np.minimum(end + 1, size)


def index_range(idx: AffineIndex, lo: dict[str, int], hi: dict[str, int],
                 local: dict[str, int], size: int) -> tuple[int, int]:
    """[start, end) of one tensor dimension over an axis box, clipped to the tensor."""
    if any(a in local for a in idx.axes):
        return 0, size
    start = end = idx.offset
    for a, c in idx.terms:
        if c >= 0:
            start += c * lo[a]
            end += c * (hi[a] - 1)
        else:
            start += c * (hi[a] - 1)
            end += c * lo[a]
    return max(start, 0), min(end + 1, size)


def home_counts_many(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray,
                     shape: tuple[int, ...], slice_elems: int, num_cores: int) -> np.ndarray:
    """``sum_i weights[i] * (elements of box_i homed on each core)`` for many boxes at once (rows of starts/ends).

    Each box is cut into contiguous runs of the row-major tensor (trailing dimensions it
    covers whole merge into longer runs); every run adds to the one or two home cores at its
    ends and whole slices in between.
    """
    counts = np.zeros(num_cores + 2, np.int64)
    nonempty = np.all(ends > starts, axis=1)
    starts, ends, weights = starts[nonempty], ends[nonempty], np.asarray(weights)[nonempty]
    if starts.shape[0] == 0:
        return counts[:num_cores]
    ndim = len(shape)
    strides = np.array([math.prod(shape[d + 1:]) for d in range(ndim)], np.int64)
    full = (starts == 0) & (ends == np.asarray(shape, np.int64))
    trailing = np.zeros(starts.shape[0], np.int64)
    still = np.ones(starts.shape[0], bool)
    for d in range(ndim - 1, 0, -1):
        still &= full[:, d]
        trailing += still
    last = ndim - 1 - trailing
    for dim in np.unique(last):
        sel = np.flatnonzero(last == dim)
        run = (ends[sel, dim] - starts[sel, dim]) * strides[dim]
        run_start = starts[sel, dim] * strides[dim]
        box = np.arange(sel.size)
        for d in range(dim - 1, -1, -1):  # expand leading dimensions into runs (ragged)
            lengths = (ends[sel, d] - starts[sel, d])[box]
            first_of = np.repeat(np.cumsum(lengths) - lengths, lengths)
            k = np.arange(first_of.size) - first_of
            box = np.repeat(box, lengths)
            run_start = np.repeat(run_start, lengths) + (starts[sel, d][box] + k) * strides[d]
        length = run[box]
        weight = weights[sel][box]
        end = run_start + length
        first = run_start // slice_elems
        final = (end - 1) // slice_elems
        same = first == final
        counts += np.bincount(first[same], weights=(length * weight)[same],
                              minlength=num_cores + 2).astype(np.int64)
        split = ~same
        if split.any():
            f, l, st, en, w = first[split], final[split], run_start[split], end[split], weight[split]
            counts += np.bincount(f, weights=((f + 1) * slice_elems - st) * w, minlength=num_cores + 2).astype(np.int64)
            counts += np.bincount(l, weights=(en - l * slice_elems) * w, minlength=num_cores + 2).astype(np.int64)
            diff = np.bincount(f + 1, weights=slice_elems * w, minlength=num_cores + 3)[: num_cores + 2] \
                - np.bincount(l, weights=slice_elems * w, minlength=num_cores + 3)[: num_cores + 2]
            counts += np.cumsum(diff).astype(np.int64)
    return counts[:num_cores]


def slice_elements(shape, num_cores: int) -> int:
    """Elements of a tensor homed on each core (a scalar takes one element, on core 0)."""
    return max(math.ceil(math.prod(shape) / num_cores), 1)


def home_slice_bytes(shape, dtype: str, num_cores: int) -> int:
    """Bytes per core of a tensor in the VGM: its row-major elements cut linearly over all
    cores (T10 §2.2), ``ceil(elements / cores)`` of them homed on each. The one per-core size
    of a VGM tensor: the functional device allocates exactly this."""
    return slice_elements(tuple(shape), num_cores) * dtype_bytes(dtype)


def home_bytes(tensors, num_cores: int) -> int:
    """Per-core bytes of the home slices of ``tensors`` (``(shape, dtype)`` pairs)."""
    return sum(home_slice_bytes(shape, dtype, num_cores) for shape, dtype in tensors)


def region_home_tensors(program, chip_inputs: bool = True, constants: bool = True) -> dict:
    """Name -> ``(shape, dtype)`` of every tensor a VGM region of ``program`` homes: its
    inputs (without those produced on chip by an earlier region unless ``chip_inputs``), its
    constants if ``constants``, and every operator's output."""
    tensors: dict[str, tuple[tuple[int, ...], str]] = {}
    for decl in program.inputs:
        if chip_inputs or decl.source != "chip":
            tensors[decl.name] = (tuple(decl.shape), decl.dtype)
    if constants:
        for name, entry in program.constants.items():
            tensors[name] = (tuple(int(s) for s in entry["shape"]), str(entry["dtype"]))
    for op in program.ops:
        tensors[op.output_name] = (tuple(op.expr.output.shape), op.expr.output.dtype)
    return tensors


def vgm_region_bytes(programs, num_cores: int) -> int:
    """Per-core VGM reservation of a whole model: every tensor keeps a home slice (T10 §2.2:
    persistent weights and temporary activations alike live in the VGM); an input produced
    by an earlier region is counted once, as that region's output. Model weights are left
    to the caller (the compiler's on-chip reservation)."""
    return sum(home_bytes(region_home_tensors(p, chip_inputs=False, constants=False).values(), num_cores)
               for p in programs)
