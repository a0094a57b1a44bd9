"""Run VGM operators on data: load-compute-store over a virtual global memory (T10 §2.2, Fig. 2a).

The timing simulator's VGM model (``vgm_timing``) times the baseline T10 is measured against; this
module executes it on the functional device, with the same execution model, so that a VGM
program computes the same numbers as its compute-shift twin:

* the *VGM region* (:class:`VgmRegion`): every tensor of the program keeps home slices spread
  linearly over all cores -- element ``e`` of the row-major tensor lives on core
  ``e // ceil(size / cores)`` (:func:`home_of`); each core's slice is its own numpy buffer;
* per wave, tile ``i`` of the operator runs on core ``i mod cores``
  (:meth:`runtime_sim.contract.vgm_layout.VgmLayout.tile_origins`); per reduction chunk, every tile core
  copies the box of each input its tile reads from the home cores into a local tile buffer
  (*load*; under a ``reuse`` plan a core whose previous box of an input is the same keeps
  its own buffer instead, :meth:`_OpRun._fetch_or_keep`), evaluates the tensor expression on
  that buffer only (*compute*,
  :mod:`runtime_sim.functional.expr_eval`) and accumulates into its output tile;
* after the last chunk the epilogue is applied once to the full sum (its inputs are fetched
  then, as the timing model charges them) and the output tile is rounded to the output dtype
  and written to the output's home slices (*store*).
* an attention operator runs the online softmax over its key chunks instead of a sum
  (:func:`runtime_sim.functional.attention_step.online_update`) and divides by the running
  sum before its epilogue.

The boxes fetched are exactly those :meth:`runtime_sim.contract.vgm_layout.VgmLayout.traffic` charges, so the
bytes reported here equal the ``VgmTiming.bytes_moved`` of the timing simulator's VGM model (the
two executors never import each other; the contract defines both counts). Nothing is computed
from a host-side copy of a tensor: a fetch from the wrong home core gives a wrong answer.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np

from runtime_sim.contract.energy import ActionCounts
from runtime_sim.contract.errors import DeviceProgramError, SramOverflowError, short_name
from runtime_sim.contract.expr import AffineIndex, dtype_bytes, load_index, merged_axes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import check_op_inputs
from runtime_sim.contract.plan import VgmPlan
from runtime_sim.contract.program import DeviceProgram, OpProgram
from runtime_sim.contract.vgm_layout import (
    VgmLayout,
    home_bytes,
    index_ranges,
    region_home_tensors,
    slice_elements,
)
from runtime_sim.functional.attention_step import online_update
from runtime_sim.functional.expr_eval import COMPUTE_DTYPE, ExprEvaluator
from runtime_sim.functional.run_counters import count_value
from schedules.actions import action_metrics, vgm_actions


def home_of(flat: np.ndarray, slice_elems: int) -> tuple[np.ndarray, np.ndarray]:
    """(home core, offset in its slice) of row-major element indices ``flat`` (T10 §2.2:
    the VGM maps every tensor linearly over all cores)."""
    return flat // slice_elems, flat % slice_elems


def region_bytes_per_core(program: DeviceProgram, num_cores: int) -> int:
    """SRAM per core of the VGM region of ``program``: a home slice of every tensor it holds
    (region inputs, constants and every operator's output), reserved for the whole region.

    Unlike :func:`runtime_sim.contract.vgm_layout.vgm_region_bytes`, constants count: the functional device
    really keeps them in home slices (the timing helper leaves weights to the caller).
    """
    return home_bytes(region_home_tensors(program).values(), num_cores)


@dataclass
class VgmOpStats:
    """What one VGM operator did on the device (the ``ops`` entries of ``last_run_stats``)."""

    op: str
    kind: str
    cores: int
    tiles: int
    waves: int
    chunks: int
    steps: int  # load-compute steps of a core: waves x reduction chunks
    fetch_bytes: int  # copied from home slices into tile buffers (epilogue inputs included)
    store_bytes: int  # output tiles written to their home slices
    host_placed_bytes: int  # region inputs and constants written into the VGM
    relayout_bytes: int  # tensors of compute-shift operators moved into the VGM
    vgm_bytes_per_core: int
    sram_bytes_per_core: int  # peak: VGM region, tile buffers, held tensors and shift buffer
    execution: str = "vgm"
    rotation_bytes: int = 0
    reduction_bytes: int = 0
    shift_bytes: int = 0
    #: its actions that cost energy (:func:`schedules.actions.vgm_actions`), given by
    #: :meth:`to_dict` as the glossary's metrics
    actions: ActionCounts = field(default_factory=ActionCounts)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("actions")
        data.update({k: count_value(v) for k, v in action_metrics(self.actions).items()})
        return data


@dataclass
class _TileBuffers:
    """One input's tile buffers of a group of tiles: ``data[i]`` is tile ``i``'s box, which
    starts at global index ``starts[i]`` and ends (exclusive) at ``ends[i]``."""

    data: np.ndarray  # [tiles, *largest box]
    starts: np.ndarray  # [tiles, dims]
    ends: np.ndarray


class VgmRegion:
    """The VGM region of one device program and the load-compute-store of its operators.

    ``homes[name]`` is ``[cores, slice elements]``: row ``c`` is core ``c``'s home slice.
    """

    def __init__(self, program: DeviceProgram, hw: HardwareSpec):
        self.hw = hw
        self.num_cores = hw.num_cores
        self.bytes_per_core = region_bytes_per_core(program, hw.num_cores)
        self.homes: dict[str, np.ndarray] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}

    # -- home slices ----------------------------------------------------------------------
    def holds(self, name: str) -> bool:
        return name in self.homes

    def write(self, name: str, array: np.ndarray) -> int:
        """Put a whole tensor into its home slices (from the host or a compute-shift operator);
        returns the bytes written."""
        arr = np.asarray(array)
        slice_elems = slice_elements(arr.shape, self.num_cores)
        flat = np.zeros(slice_elems * self.num_cores, arr.dtype)
        flat[: arr.size] = arr.reshape(-1)
        self.homes[name] = flat.reshape(self.num_cores, slice_elems)
        self._shapes[name] = tuple(arr.shape)
        return arr.nbytes

    def read(self, name: str) -> np.ndarray:
        """The tensor assembled from its home slices (what the host reads back)."""
        shape = self._shapes[name]
        return self.homes[name].reshape(-1)[: math.prod(shape)].reshape(shape).copy()

    def _fetch(self, name: str, shape: tuple[int, ...], starts: np.ndarray,
               ends: np.ndarray) -> tuple[_TileBuffers, int]:
        """Every tile core copies its box of tensor ``name`` from the home cores; returns the
        tile buffers and the bytes copied."""
        home = self.homes[name]
        n, nd = starts.shape
        lengths = np.maximum(ends - starts, 0)
        box = [int(lengths[:, d].max(initial=0)) for d in range(nd)]
        flat = np.zeros([n] + [1] * nd, np.int64)
        inside = np.ones([n] + [1] * nd, bool)
        for d in range(nd):
            view = [1] * (nd + 1)
            view[d + 1] = box[d]
            pos = starts[:, d].reshape([-1] + [1] * nd) + np.arange(box[d]).reshape(view)
            # tiles of a group share lengths but not boxes (clipped at tensor edges): the
            # stack is as large as the largest box and the rest of a smaller one stays empty
            inside = inside & (pos < ends[:, d].reshape([-1] + [1] * nd))
            flat = flat * shape[d] + pos
        inside = np.broadcast_to(inside, [n] + box)
        flat = np.broadcast_to(flat, [n] + box)
        core, offset = home_of(flat[inside], home.shape[1])
        data = np.zeros([n] + box, home.dtype)
        data[inside] = home[core, offset]
        return _TileBuffers(data, starts, ends), int(inside.sum()) * home.dtype.itemsize

    # -- one operator ----------------------------------------------------------------------
    def run_op(self, op: OpProgram, env: Mapping[str, np.ndarray], produced: set[str],
               used_per_core: np.ndarray) -> tuple[np.ndarray, VgmOpStats]:
        """Load-compute-store ``op`` wave by wave and chunk by chunk (T10 §2.2, Fig. 2a).

        ``env`` has the region's tensors as arrays (for those not yet in the VGM),
        ``produced`` the names computed on chip, ``used_per_core`` the SRAM already in use on
        every core (the VGM region included). Raises :class:`SramOverflowError` when the
        region plus the tile buffers plus the shift buffer exceed a core's SRAM. The tile
        buffers are charged as the VGM model sizes them
        (:meth:`~runtime_sim.contract.vgm_layout.VgmLayout.working_bytes_per_core`, the first tile) or as
        actually fetched, whichever is larger: an interior tile of a padded convolution reads
        a halo that the first tile, clipped at the padding, does not.
        """
        if not isinstance(op.plan, VgmPlan):
            raise DeviceProgramError(f"operator '{short_name(op.name)}' has a compute-shift "
                                     "plan, not a VGM plan")
        check_op_inputs(op)
        expr = op.expr
        hw = self.hw
        for t, access in enumerate(expr.tensors):
            hw.check_dtype(access.dtype, f"operator '{short_name(op.name)}': tensor '{access.name}'",
                           mask=t < len(expr.inputs))
        layout = VgmLayout(expr, op.plan, self.num_cores)
        budget = hw.sram_bytes_per_core
        base = used_per_core + hw.shift_buffer_bytes
        peak = int(base.max()) + layout.working_bytes_per_core()
        _check_sram(op, base + layout.working_bytes_per_core(), budget, hw.name)

        host = relayout = 0
        for t, name in enumerate(op.input_names):
            access = expr.inputs[t]
            if not self.holds(name):
                if name not in env:
                    raise DeviceProgramError(f"operator '{short_name(op.name)}' reads unknown "
                                             f"tensor '{short_name(name)}'")
                arr = np.asarray(env[name])
                if tuple(arr.shape) != tuple(access.shape) or str(arr.dtype) != access.dtype:
                    raise DeviceProgramError(
                        f"operator '{short_name(op.name)}' reads '{short_name(name)}' as "
                        f"{access.dtype}{list(access.shape)}, "
                        f"it is {arr.dtype}{list(arr.shape)}"
                    )
                written = self.write(name, arr)
                if name in produced:
                    relayout += written
                else:
                    host += written
            elif self._shapes[name] != tuple(access.shape) or str(self.homes[name].dtype) != access.dtype:
                raise DeviceProgramError(
                    f"operator '{short_name(op.name)}' reads '{short_name(name)}' as "
                    f"{access.dtype}{list(access.shape)}, "
                    f"the VGM holds {self.homes[name].dtype}{list(self._shapes[name])}"
                )
        out = expr.output
        self.write(op.output_name, np.zeros(out.shape, out.dtype))
        written = np.zeros(math.prod(out.shape), np.int64)

        run = _OpRun(self, op, layout, op.input_names)
        fetched = stored = 0
        for wave in range(layout.waves):
            origins = layout.tile_origins(wave)
            for idx, lengths in _groups(layout, origins):
                f, s, tile_bytes = run.tiles(origins, idx, lengths, written)
                fetched, stored = fetched + f, stored + s
                peak = max(peak, int(base.max()) + tile_bytes)
                _check_sram(op, base + tile_bytes, budget, hw.name)
        if not np.all(written == 1):
            raise DeviceProgramError(
                f"operator '{short_name(op.name)}': tiles wrote {int(np.count_nonzero(written))} of "
                f"{written.size} output elements, {int(np.count_nonzero(written > 1))} more than once"
            )
        stats = VgmOpStats(
            op=op.name, kind=expr.kind, cores=self.num_cores, tiles=layout.num_tiles,
            waves=layout.waves, chunks=layout.num_chunks, steps=layout.waves * layout.num_chunks,
            fetch_bytes=fetched, store_bytes=stored, host_placed_bytes=host, relayout_bytes=relayout,
            vgm_bytes_per_core=self.bytes_per_core, sram_bytes_per_core=peak,
            actions=vgm_actions(layout, hw, fetched + stored),
        )
        return self.read(op.output_name), stats


class _OpRun:
    """The load-compute-store of one group of equally sized tiles of one operator."""

    def __init__(self, region: VgmRegion, op: OpProgram, layout: VgmLayout, names: tuple[str, ...]):
        self.region = region
        self.op = op
        self.layout = layout
        self.expr = op.expr
        self.names = names
        self.main = [t for t in range(len(self.expr.inputs)) if t not in self.expr.epilogue_inputs]
        self.local = tuple(a.name for a in self.expr.local_axes)
        # output dimensions as their digits (runtime_sim.contract.expr.merged_axes): a grouped conv's
        # channel g*k + f is stored as if the output had the dimensions (G, k)
        extent = {a.name: a.extent for a in self.expr.axes}
        self.out_axes = []
        for ix in self.expr.output.indices:
            digits = merged_axes(ix, extent)
            if digits is None:
                raise DeviceProgramError(f"operator '{short_name(op.name)}': output index {ix} is "
                                         "not a plain axis or axes merged row-major")
            self.out_axes.extend(digits)
        self.out_sizes = [extent[a] for a in self.out_axes]
        # reuse plans: per input, the box and buffer each core holds from its last fetch
        self.held: dict[int, dict[int, tuple]] | None = {} if layout.reuse else None
        if sorted(self.out_axes) != sorted(layout.spatial):
            raise DeviceProgramError(
                f"operator '{short_name(op.name)}': output axes {self.out_axes} are not its spatial axes "
                f"{list(layout.spatial)}"
            )

    def _boxes(self, t: int, lo: dict[str, np.ndarray], hi: dict[str, np.ndarray],
               n: int) -> tuple[np.ndarray, np.ndarray]:
        # the boxes VgmLayout.traffic charges, so that fetched bytes match the timing model
        access = self.expr.tensors[t]
        ranges = [index_ranges(ix, lo, hi, self.layout.local_extent, access.shape[d], n)
                  for d, ix in enumerate(access.indices)]
        if not ranges:
            return np.zeros((n, 0), np.int64), np.zeros((n, 0), np.int64)
        return np.stack([r[0] for r in ranges], axis=1), np.stack([r[1] for r in ranges], axis=1)

    def tiles(self, origins: dict[str, np.ndarray], idx: np.ndarray, lengths: dict[str, int],
              written: np.ndarray) -> tuple[int, int, int]:
        """Run the tiles ``idx`` of a wave (all of ``lengths`` on the spatial axes) through
        every reduction chunk, the epilogue and the store; returns (bytes fetched, bytes
        stored, largest tile working set in bytes)."""
        layout, expr, region = self.layout, self.expr, self.region
        n = idx.size
        spatial = layout.spatial
        lo = {a: np.asarray(origins[a])[idx] for a in spatial}
        out_shape = [lengths[a] for a in spatial]
        acc = np.zeros([n] + out_shape, COMPUTE_DTYPE)
        out_item = dtype_bytes(expr.output.dtype)
        out_tile_bytes = math.prod(out_shape) * out_item
        fetched = 0
        tile_bytes = 0
        epi_boxes = {}
        epi_lo = dict(lo, **{a: np.zeros(n, np.int64) for a in layout.reduce})
        epi_hi = self._hi(epi_lo, n)
        for t in expr.epilogue_inputs:
            epi_boxes[t] = self._boxes(t, epi_lo, epi_hi, n)
        epi_bytes = sum(_box_bytes(s, e) * dtype_bytes(expr.tensors[t].dtype)
                        for t, (s, e) in epi_boxes.items())
        online = None  # an attention operator's (running max, running sum, output)
        for chunk in layout.chunk_origins():
            c_lo = dict(lo, **{a: np.full(n, chunk[a], np.int64) for a in layout.reduce})
            c_hi = self._hi(c_lo, n)
            buffers: dict[int, _TileBuffers] = {}
            in_bytes = np.zeros(n, np.int64)
            for t in self.main:
                starts, ends = self._boxes(t, c_lo, c_hi, n)
                if self.held is None:
                    buffers[t], nbytes = region._fetch(self.names[t], expr.tensors[t].shape, starts, ends)
                else:
                    buffers[t], nbytes = self._fetch_or_keep(t, idx, starts, ends)
                fetched += nbytes
                in_bytes += np.prod(np.maximum(ends - starts, 0), axis=1) * dtype_bytes(expr.tensors[t].dtype)
            tile_bytes = max(tile_bytes, int(in_bytes.max(initial=0)) + epi_bytes + out_tile_bytes)
            red = layout.reduce
            order = spatial + red + self.local
            lens = out_shape + [int(c_hi[a][0] - c_lo[a][0]) for a in red] + \
                [layout.local_extent[a] for a in self.local]
            pos = _positions(order, lens, c_lo)
            ev = ExprEvaluator(order, lens, _Loader(self.op.name, expr, buffers, pos, len(order)),
                               pos.__getitem__)
            if expr.kind == "attention":  # the online softmax over the key chunks
                if online is None:
                    shape = [n] + out_shape + [1] * (len(red) + len(self.local))
                    online = (np.full(shape, -np.inf, COMPUTE_DTYPE), np.zeros(shape, COMPUTE_DTYPE),
                              np.zeros(shape, COMPUTE_DTYPE))
                online = online_update(ev, expr.body, red[0], None, *online)
                continue
            if red:
                value = ev.evaluate_reduce(expr.body, red, expr.combiner)
            else:
                value = ev.evaluate(expr.body)
            acc += _keep(np.asarray(value, COMPUTE_DTYPE), len(spatial), self.op.name)

        if online is not None:
            with np.errstate(all="ignore"):
                acc += _keep(online[2] / online[1], len(spatial), self.op.name)
        # the output tile in output-dimension order; the epilogue maps the full sum once
        perm = [spatial.index(a) for a in self.out_axes]
        result = acc.transpose([0] + [1 + p for p in perm])
        if expr.epilogue is not None:
            buffers = {}
            for t, (starts, ends) in epi_boxes.items():
                buffers[t], nbytes = region._fetch(self.names[t], expr.tensors[t].shape, starts, ends)
                fetched += nbytes
            order = tuple(self.out_axes) + self.local
            lens = [lengths[a] for a in self.out_axes] + [layout.local_extent[a] for a in self.local]
            pos = _positions(order, lens, lo)
            ev = ExprEvaluator(order, lens, _Loader(self.op.name, expr, buffers, pos, len(order)),
                               pos.__getitem__,
                               result=result.reshape(result.shape + (1,) * len(self.local)))
            value = _keep(np.asarray(ev.evaluate(expr.epilogue), COMPUTE_DTYPE), len(self.out_axes),
                          self.op.name)
            result = np.broadcast_to(value, result.shape)

        # store: every element to its home core's slice, rounded to the output dtype
        out = expr.output
        flat = np.zeros([n] + [1] * len(self.out_axes), np.int64)
        for d, a in enumerate(self.out_axes):
            view = [1] * (len(self.out_axes) + 1)
            view[d + 1] = lengths[a]
            flat = flat * self.out_sizes[d] + lo[a].reshape([-1] + [1] * len(self.out_axes)) \
                + np.arange(lengths[a]).reshape(view)
        flat = np.broadcast_to(flat, result.shape).reshape(-1)
        home = region.homes[self.op.output_name]
        core, offset = home_of(flat, home.shape[1])
        with np.errstate(all="ignore"):
            home[core, offset] = result.reshape(-1).astype(out.dtype)
        np.add.at(written, flat, 1)
        return fetched, n * out_tile_bytes, tile_bytes

    def _fetch_or_keep(self, t: int, cores: np.ndarray, starts: np.ndarray,
                       ends: np.ndarray) -> tuple[_TileBuffers, int]:
        """Tile buffers of input ``t`` under a ``reuse`` plan: a core (the ``n``-th tile of a
        wave runs on core ``n``) whose previous box of ``t`` is this one keeps its buffer;
        the others fetch from the home cores (:meth:`VgmRegion._fetch`). Returns the buffers
        and the bytes fetched, as :meth:`VgmLayout.traffic` counts them."""
        held = self.held.setdefault(t, {})
        n, nd = starts.shape
        lengths = np.maximum(ends - starts, 0)
        need = np.array([not (int(c) in held and np.array_equal(held[int(c)][0], starts[i])
                              and np.array_equal(held[int(c)][1], ends[i]))
                         for i, c in enumerate(cores)], bool)
        box = [int(lengths[:, d].max(initial=0)) for d in range(nd)]
        data = np.zeros([n] + box, self.region.homes[self.names[t]].dtype)
        nbytes = 0
        if need.any():
            got, nbytes = self.region._fetch(self.names[t], self.expr.tensors[t].shape,
                                             starts[need], ends[need])
            for j, i in enumerate(np.flatnonzero(need)):
                piece = got.data[(j, *[slice(0, int(length)) for length in lengths[i]])]
                held[int(cores[i])] = (starts[i].copy(), ends[i].copy(), piece.copy())
        for i in range(n):
            piece = held[int(cores[i])][2]
            data[(i, *[slice(0, s) for s in piece.shape])] = piece
        return _TileBuffers(data, starts, ends), nbytes

    def _hi(self, lo: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        layout = self.layout
        return {a: np.minimum(lo[a] + layout.tile[a], layout.extent[a]) for a in lo}


class _Loader:
    """``load`` of :class:`ExprEvaluator`: a tile core reads its own tile buffer only.

    Positions outside the tensor (convolution padding) read 0; a position inside the tensor
    but outside the fetched box means the program reads data it never loaded.
    """

    def __init__(self, op: str, expr, buffers: dict[int, _TileBuffers], pos: dict[str, np.ndarray],
                 nd: int):
        self.op, self.expr, self.buffers, self.pos, self.nd = op, expr, buffers, pos, nd

    def _index(self, ix: AffineIndex) -> np.ndarray:
        value = np.full([1] * (self.nd + 1), ix.offset, np.int64)
        for a, c in ix.terms:
            if a not in self.pos:
                raise DeviceProgramError(f"operator '{self.op}': a load reads unknown axis '{a}'")
            value = value + c * self.pos[a]
        return value

    def __call__(self, node: dict) -> np.ndarray:
        t = int(node["input"])
        access = self.expr.tensors[t]
        if t not in self.buffers:
            raise DeviceProgramError(f"operator '{self.op}': input '{access.name}' was not fetched")
        buf = self.buffers[t]
        n = buf.data.shape[0]
        tile = np.arange(n).reshape([-1] + [1] * self.nd)
        locs, valid = [], np.ones([1] * (self.nd + 1), bool)
        for d, ix in enumerate(load_index(node)):
            g = self._index(ix)
            col = [-1] + [1] * self.nd
            loc = g - buf.starts[:, d].reshape(col)
            in_tensor = (g >= 0) & (g < access.shape[d])
            in_box = (loc >= 0) & (loc < (buf.ends[:, d] - buf.starts[:, d]).reshape(col))
            if np.any(in_tensor & ~in_box):
                raise DeviceProgramError(
                    f"operator '{self.op}': a tile reads {access.name} dim {d} outside the box it fetched"
                )
            valid = valid & in_tensor
            locs.append(np.clip(loc, 0, max(buf.data.shape[d + 1] - 1, 0)))
        if buf.data.size == 0:  # every tile's box is empty: only padding is read
            return np.zeros(np.broadcast_shapes(tile.shape, valid.shape), buf.data.dtype)
        value = buf.data[(tile, *locs)]
        if not np.all(valid):
            value = np.where(valid, value, np.zeros((), buf.data.dtype))
        return value


def _positions(order: tuple[str, ...], lengths: list[int], lo: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Global index of every axis of ``order`` for every tile (core-local axes start at 0)."""
    nd = len(order)
    pos = {}
    for d, a in enumerate(order):
        view = [1] * (nd + 1)
        view[d + 1] = lengths[d]
        span = np.arange(lengths[d], dtype=np.int64).reshape(view)
        pos[a] = span + lo[a].reshape([-1] + [1] * nd) if a in lo else span
    return pos


def _groups(layout: VgmLayout, origins: dict[str, np.ndarray]):
    """Tiles of a wave grouped by their lengths (edge tiles are smaller), so that each group
    is evaluated exactly, with no padding that a reduction could pick up."""
    n = origins["_n"].size
    if not layout.spatial:
        yield np.arange(n), {}
        return
    lengths = np.stack([np.minimum(origins[a] + layout.tile[a], layout.extent[a]) - origins[a]
                        for a in layout.spatial], axis=1)
    shapes, inverse = np.unique(lengths, axis=0, return_inverse=True)
    for g, shape in enumerate(shapes):
        yield np.flatnonzero(inverse.reshape(-1) == g), dict(zip(layout.spatial, (int(s) for s in shape)))


def _box_bytes(starts: np.ndarray, ends: np.ndarray) -> int:
    if starts.shape[0] == 0:
        return 0
    return int(np.prod(np.maximum(ends - starts, 0), axis=1).max())


def _keep(value: np.ndarray, n_spatial: int, op: str) -> np.ndarray:
    """The value over the tile's spatial axes: reduced and core-local dimensions must be 1."""
    extra = value.shape[1 + n_spatial:]
    if any(k != 1 for k in extra):
        raise DeviceProgramError(f"operator '{op}': a core-local axis is used outside a reduce")
    return value.reshape(value.shape[: 1 + n_spatial])


def _check_sram(op: OpProgram, needed: np.ndarray, budget: int, chip: str) -> None:
    over = np.flatnonzero(needed > budget)
    if over.size:
        core = int(over[0])
        raise SramOverflowError(op.name, core, budget, int(needed[core]), label=op.label or op.expr.kind,
                                chip=chip, tensors=op.expr.tensor_summary())
