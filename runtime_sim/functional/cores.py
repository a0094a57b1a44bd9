"""The device operations on every core's SRAM: allocate, place, compute, shift, reduce, read (T10 §4.4).

T10 §4.4 abstracts a distributed-memory chip with three interfaces, which :class:`Cores`
offers with the same names:

* :meth:`~Cores.allocate` -- reserve, on every core of an operator, one partition of each of
  its tensors (SRAM is accounted per core, including the shift buffer of T10 §5, in the
  :class:`~runtime_sim.functional.sram.SramLedger`);
* :meth:`~Cores.compute` -- one compute step: every core computes its sub-task from its *own*
  buffers only (:mod:`runtime_sim.functional.expr_eval`);
* :meth:`~Cores.shift` -- one rotation: a core receives a partition from another.

Around them, :meth:`~Cores.place` puts each tensor in its initial placement (T10 §4.4
"Sub-tensor placement", :mod:`runtime_sim.functional.placement`), :meth:`~Cores.reduce_outputs`
sums output replicas into ring 0 and :meth:`~Cores.read_output` applies the epilogue and
assembles the tensor. A preloaded operator (Elk §4.5) is allocated over its preload space and
receives its preloaded inputs with :meth:`~Cores.distribute`
(:mod:`runtime_sim.functional.preload_store`).

The state of all cores is held as stacked arrays ``[cores, *partition shape]``, so a step is
a handful of numpy calls whatever the number of cores; nothing is ever computed from a
host-side copy of a tensor, so a wrong placement or shift gives a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError, InvalidPlanError, short_name
from runtime_sim.contract.expr import AffineIndex, load_index, merged_axes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout, ShiftEvent
from runtime_sim.contract.plan_rules import STAT_BYTES
from runtime_sim.functional import attention_step
from runtime_sim.functional.expr_eval import COMPUTE_DTYPE, ExprEvaluator
from runtime_sim.functional.link_hops import LinkHops
from runtime_sim.functional.placement import check_dtype, gathered_rows, partitions
from runtime_sim.functional.preload_store import PreloadStore
from runtime_sim.functional.sram import SramLedger


@dataclass
class Allocation:
    """The buffers of one allocated operator on its cores (T10 §4.4 "allocate")."""

    name: str
    layout: OpLayout
    buffers: list[np.ndarray]  # per tensor: [cores, *partition_shape]; output in float32
    placed: list[bool]
    bytes_per_core: int
    shift_bytes: int = 0
    reduction_bytes: int = 0
    steps: int = 0
    reduced: bool = False
    sram_peak: int = 0  # max bytes on a core while allocated, shift buffer included
    #: an attention operator's online-softmax state (running max, running sum per row)
    stats: attention_step.State | None = None


class Cores:
    """Every core of the configured chip: the allocated operators' buffers and the operations
    on them. SRAM is counted in ``sram``; preloaded inputs come from ``preloads``."""

    def __init__(self, sram: SramLedger, preloads: PreloadStore) -> None:
        self._sram = sram
        self._preloads = preloads
        self._allocs: dict[str, Allocation] = {}
        self._hops: LinkHops | None = None

    @property
    def link_hops(self) -> LinkHops:
        """The current chip's network as the device counts its transfers
        (:mod:`runtime_sim.functional.link_hops`)."""
        hw = self.hw
        if self._hops is None or self._hops.hw != hw:
            self._hops = LinkHops(hw)
        return self._hops

    # -- configuration ------------------------------------------------------------------
    @property
    def hw(self) -> HardwareSpec:
        """The chip (raises :class:`DeviceProgramError` before :meth:`configure`)."""
        return self._sram.hw

    def configure(self, hw: HardwareSpec) -> None:
        """Become chip ``hw``. Changing the chip drops everything held on the old one."""
        if self._sram.is_for(hw):
            return
        self._allocs.clear()
        self._preloads.clear()
        self._sram.reset(hw)

    def is_allocated(self, op_name: str) -> bool:
        """Whether operator ``op_name`` holds execution space now."""
        return op_name in self._allocs

    def allocated(self) -> list[str]:
        """The operators holding execution space now."""
        return list(self._allocs)

    def allocation(self, op_name: str) -> Allocation:
        """The buffers and counters of allocated operator ``op_name``."""
        try:
            return self._allocs[op_name]
        except KeyError:
            raise DeviceProgramError(f"operator '{short_name(op_name)}' is not allocated") from None

    # -- T10 §4.4: allocate -------------------------------------------------------------
    def allocate(self, op_name: str, layout: OpLayout, in_place: int = 0) -> None:
        """Reserve one partition of every tensor of ``op_name`` on each of its cores.

        Raises :class:`SramOverflowError` naming the operator and the first core whose
        partitions, plus tensors already held on it, plus the shift buffer (T10 §5
        "multi-copy shift with buffer"), exceed ``hw.sram_bytes_per_core``. A preloaded
        operator's preload space becomes part of its execution space. ``in_place``: bytes
        per core of its partitions already held as resident state (model state idling in
        this very placement, :func:`runtime_sim.contract.resting.in_place_bytes`), not
        reserved twice.
        """
        hw = self.hw
        if op_name in self._allocs:
            raise DeviceProgramError(f"operator '{short_name(op_name)}' is already allocated")
        if layout.num_cores > hw.num_cores:
            raise InvalidPlanError(
                f"operator '{short_name(op_name)}' is planned on {layout.num_cores} cores, "
                f"but chip '{hw.name}' has {hw.num_cores}"
            )
        ids_inputs = layout.expr.gather_ids
        for t, access in enumerate(layout.expr.tensors):
            check_dtype(hw, access.name, access.dtype, f"operator '{short_name(op_name)}'",
                        mask=t < len(layout.expr.inputs), index=t in ids_inputs)
        per_core = layout.memory_bytes_per_core() - in_place
        used = self._sram.used.copy()
        if layout.span > hw.num_cores:
            raise InvalidPlanError(
                f"operator '{short_name(op_name)}' is placed up to core {layout.span - 1}, "
                f"but chip '{hw.name}' has {hw.num_cores}"
            )
        used[layout.physical] += per_core
        # a preloaded operator's preload space becomes part of its execution space (its
        # chunks sit where its partitions go): it is not counted twice
        preload = self._preloads.absorbed_space(op_name, layout)
        peak = self._sram.check(op_name, used, preload, layout, executing=True)
        self._preloads.absorb(op_name, preload)
        n = layout.num_cores
        out = len(layout.expr.tensors) - 1
        buffers = []
        for t, access in enumerate(layout.expr.tensors):
            # the output accumulates in float32, as the AMP unit's accumulators do (T10 §5)
            dtype = COMPUTE_DTYPE if t == out else np.dtype(access.dtype)
            buffers.append(np.zeros((n, *layout.partition_shape(t)), dtype=dtype))
        placed = [False] * len(layout.expr.inputs) + [True]
        stats = attention_step.initial_state(layout) if layout.expr.kind == "attention" else None
        self._allocs[op_name] = Allocation(op_name, layout, buffers, placed, per_core, sram_peak=peak,
                                           stats=stats)
        self._sram.used = used

    def free(self, op_name: str) -> None:
        """Release the SRAM of an operator (its preload space too, if it was preloaded)."""
        alloc = self.allocation(op_name)
        self._sram.used[alloc.layout.physical] -= alloc.bytes_per_core
        del self._allocs[op_name]
        self._preloads.forget_absorbed(op_name)

    # -- Elk §4.5: preload_async and distribute --------------------------------------------
    def preload_async(self, op_name: str, layout: OpLayout, inputs: Mapping[int, np.ndarray],
                      chunks: Mapping[int, int] | None = None,
                      ids_values: Mapping[int, np.ndarray] | None = None) -> int:
        """:meth:`PreloadStore.preload_async
        <runtime_sim.functional.preload_store.PreloadStore.preload_async>` of an operator that
        is not allocated; returns the bytes delivered."""
        return self._preloads.preload_async(op_name, layout, inputs, chunks, ids_values,
                                            allocated=op_name in self._allocs)

    def distribute(self, op_name: str) -> int:
        """``distribute_data`` of ``execute(op)`` (Elk §4.5): the allocated, preloaded
        operator's buffers receive each preloaded input's partition, assembled from the
        preload spaces of every core and its block peers
        (:meth:`PreloadStore.distribute <runtime_sim.functional.preload_store.PreloadStore.distribute>`).
        Returns the bytes moved between cores."""
        alloc = self.allocation(op_name)
        assembled, moved = self._preloads.distribute(op_name, alloc.layout)
        for t, buf in assembled.items():
            alloc.buffers[t] = buf
            alloc.placed[t] = True
        return moved

    # -- T10 §4.4: initial placement ------------------------------------------------------
    def place(self, op_name: str, tensor: int, array: np.ndarray,
              ids: np.ndarray | None = None) -> int:
        """Put every core's initial partition of input ``tensor`` in its buffer.

        Positions outside the tensor (padding of a sub-operator, convolution padding read
        through negative offsets) are zero. A gathered input needs ``ids``, the values of
        its ids input: every core receives the rows they pick for its block of the view.
        Returns the bytes written to SRAM.
        """
        alloc = self.allocation(op_name)
        layout = alloc.layout
        access = layout.expr.tensors[tensor]
        if tensor >= len(layout.expr.inputs):
            raise DeviceProgramError(f"tensor {tensor} of '{short_name(op_name)}' is not an input")
        arr = np.asarray(array)
        if tuple(arr.shape) != access.tensor_shape:
            raise DeviceProgramError(
                f"operator '{short_name(op_name)}': input '{access.name}' has shape {list(arr.shape)}, "
                f"expected {list(access.tensor_shape)}"
            )
        alloc.buffers[tensor] = partitions(layout, tensor, arr,
                                           gathered_rows(layout, tensor, arr, ids, op_name))
        alloc.placed[tensor] = True
        return layout.num_cores * layout.partition_bytes(tensor)

    # -- T10 §4.4: compute --------------------------------------------------------------
    def compute(self, op_name: str, counters: Mapping[str, int]) -> None:
        """One compute step on every core: the sub-task at loop ``counters`` (T10 §4.2).

        Each core reads the chunk of each input from its own buffer (global chunk index
        from :meth:`OpLayout.chunk_index` minus the start of the partition it holds at this
        step) and adds the sub-task's result into its own output partition.
        """
        alloc = self.allocation(op_name)
        missing = [alloc.layout.expr.inputs[t].name for t, ok in enumerate(alloc.placed) if not ok]
        if missing:
            raise DeviceProgramError(f"operator '{short_name(op_name)}': inputs {missing} were not placed")
        layout = alloc.layout
        expr = layout.expr
        q = layout.chunk(counters)
        top = layout.axes
        local = tuple(a.name for a in expr.local_axes)
        order = top + local
        lengths = [layout.rp[a] for a in top] + [layout.local_extent[a] for a in local]

        def load(node: dict) -> np.ndarray:
            t = int(node["input"])
            start = layout.partition_start(t, layout.partition(t, q))
            locs = [
                layout.chunk_index(ix, q, order) - _col(start[d], len(order))
                for d, ix in enumerate(load_index(node))
            ]
            _check_bounds(op_name, expr.tensors[t].name, locs, alloc.buffers[t].shape[1:])
            return _gather(alloc.buffers[t], locs, len(order))

        def axis_value(axis: str) -> np.ndarray:
            return layout.chunk_index(AffineIndex.of_axis(axis), q, order)

        ev = ExprEvaluator(order, lengths, load, axis_value,
                           combine=_combiner(alloc) if layout.local_follow else None)
        out = len(expr.tensors) - 1
        if alloc.stats is not None:  # attention: the online-softmax step (attention_step)
            alloc.stats = attention_step.step(op_name, layout, ev, q, alloc.buffers[out], alloc.stats)
            alloc.steps += 1
            return
        if expr.reduce_axes:
            value = ev.evaluate_reduce(expr.body, expr.reduce_axes, expr.combiner)
        else:
            value = ev.evaluate(expr.body)
        value = _drop_local(np.asarray(value, COMPUTE_DTYPE), len(top), op_name)

        start = layout.partition_start(out, layout.partition(out, q))
        locs = [
            layout.chunk_index(ix, q, top) - _col(start[d], len(top))
            for d, ix in enumerate(expr.output.indices)
        ]
        _check_bounds(op_name, expr.output.name, locs, alloc.buffers[out].shape[1:])
        core = np.arange(layout.num_cores).reshape([-1] + [1] * len(top))
        # every (core, position) appears once in a chunk, so buffered += is exact
        alloc.buffers[out][(core, *locs)] += value
        alloc.steps += 1

    # -- T10 §4.4: shift ----------------------------------------------------------------
    def shift(self, op_name: str, event: ShiftEvent) -> int:
        """Rotate partitions of one tensor: core ``c`` receives the partition of ``event.source[c]``.

        Returns the bytes received over the interconnect (moving cores x partition bytes).
        """
        alloc = self.allocation(op_name)
        source = np.asarray(event.source)
        if source.shape != (alloc.layout.num_cores,):
            raise DeviceProgramError(f"shift of '{short_name(op_name)}' has {source.shape} sources")
        alloc.buffers[event.tensor] = alloc.buffers[event.tensor][source]
        moved = int(np.count_nonzero(event.moving)) * alloc.layout.partition_bytes(event.tensor)
        alloc.shift_bytes += moved
        return moved

    def run_steps(self, op_name: str,
                  on_shift: Callable[[ShiftEvent], None] | None = None) -> int:
        """All compute-shift steps of an operator (T10 §4.2 nested loops); returns shift bytes.
        ``on_shift(event)`` is called after each shift (the interpreter counts its link
        byte-hops)."""
        layout = self.allocation(op_name).layout
        moved = 0
        for counters, advancing in layout.counters():
            self.compute(op_name, counters)
            for event in layout.shifts_after(counters, advancing):
                moved += self.shift(op_name, event)
                if on_shift is not None:
                    on_shift(event)
        return moved

    # -- after the steps ----------------------------------------------------------------
    def reduce_outputs(self, op_name: str) -> int:
        """Sum the output replicas of all rings into ring 0; returns the bytes sent under the
        schedule the timing simulator picks (:meth:`LinkHops.reduction_sent_bytes`).

        Replicas exist when a reduction axis is split across cores (partial sums). An
        attention operator's replicas are combined with their running max and sum
        (:func:`attention_step.combine_replicas`), which they send too
        (:meth:`OpLayout.replica_bytes`).
        """
        alloc = self.allocation(op_name)
        if alloc.reduced:
            return 0
        layout = alloc.layout
        out = len(layout.expr.tensors) - 1
        owner_of = layout.output_owner_of()
        owners = layout.owners()
        sent = 0
        if owners.size != layout.num_cores and alloc.stats is not None:
            alloc.buffers[out], alloc.stats = attention_step.combine_replicas(
                layout, alloc.buffers[out], alloc.stats)
            sent = self.link_hops.reduction_sent_bytes(layout)
        elif owners.size != layout.num_cores:
            buf = alloc.buffers[out]
            order = np.argsort(owner_of, kind="stable")
            sorted_owner = owner_of[order]
            heads = np.flatnonzero(np.r_[True, sorted_owner[1:] != sorted_owner[:-1]])
            summed = np.add.reduceat(buf[order], heads, axis=0)
            reduced = np.zeros_like(buf)  # non-owners have sent their partial sums away
            reduced[sorted_owner[heads]] = summed
            alloc.buffers[out] = reduced
            sent = self.link_hops.reduction_sent_bytes(layout)
        alloc.reduction_bytes += sent
        alloc.reduced = True
        return sent

    def read_output(self, op_name: str) -> np.ndarray:
        """Apply the epilogue on ring-0 cores and assemble the output tensor from them.

        Partitions are cropped to the tensor (padding dropped) and rounded to its dtype.
        """
        alloc = self.allocation(op_name)
        if not alloc.reduced:
            self.reduce_outputs(op_name)
        layout = alloc.layout
        expr = layout.expr
        access = expr.output
        out = len(expr.tensors) - 1
        owners = layout.owners()
        pshape = layout.partition_shape(out)
        starts = [s[owners] for s in layout.partition_start(out, layout.partition(out, layout.chunk({})))]
        buf = alloc.buffers[out]
        if alloc.stats is not None:  # attention: o / l, then the epilogue
            buf = attention_step.normalized(layout, buf, alloc.stats)
        value = buf[owners]
        if expr.epilogue is not None:
            value = _epilogue(op_name, alloc, owners, value, starts, pshape)
        with np.errstate(all="ignore"):
            value = value.astype(access.dtype)
        if not access.shape:  # a scalar: one ring-0 core holds it
            return np.array(value.reshape(-1)[0], dtype=access.dtype)
        nd = len(pshape)
        index, valid = [], np.ones([owners.size] + [1] * nd, bool)
        for d, (start, length) in enumerate(zip(starts, pshape)):
            view = [1] * (nd + 1)
            view[d + 1] = length
            pos = start.reshape([-1] + [1] * nd) + np.arange(length).reshape(view)
            valid = valid & (pos >= 0) & (pos < access.shape[d])
            index.append(pos)
        valid = np.broadcast_to(valid, value.shape)
        full = np.zeros(access.shape, access.dtype)
        if int(valid.sum()) != full.size:
            raise DeviceProgramError(
                f"operator '{short_name(op_name)}': ring-0 partitions cover {int(valid.sum())} of "
                f"{full.size} output elements"
            )
        full[tuple(np.broadcast_to(i, valid.shape)[valid] for i in index)] = value[valid]
        return full


# -- helpers of compute and read_output ----------------------------------------------------
def _combiner(alloc: Allocation) -> Callable[[dict, np.ndarray], np.ndarray]:
    """Combine partial statistics of split core-local reductions across the cores that
    share rows (:meth:`OpLayout.combine_groups`): an all-reduce per distinct statistic and
    step, counted as ``2 (G - 1)`` float32 messages per group (reduce, then broadcast)."""
    layout = alloc.layout
    split = set(layout.local_follow)
    groups = layout.combine_groups
    order = np.argsort(groups, kind="stable")
    heads = np.flatnonzero(np.r_[True, groups[order][1:] != groups[order][:-1]])
    member = np.repeat(np.arange(heads.size), np.diff(np.r_[heads, groups.size]))
    back = np.empty_like(order)
    back[order] = member  # core -> index of its group's combined value
    G = layout.combine_size
    ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum}
    seen: set[str] = set()

    def combine(node: dict, partial: np.ndarray) -> np.ndarray:
        if not set(node["axes"]) & split:
            return partial
        partial = np.broadcast_to(partial, (layout.num_cores,) + partial.shape[1:])
        total = ufunc[node.get("combiner", "sum")].reduceat(partial[order], heads, axis=0)
        key = layout.reduce_key(node)
        if key not in seen:  # the same statistic under other axis names is combined once
            seen.add(key)
            elems = int(np.prod(partial.shape[1:], dtype=np.int64))
            alloc.reduction_bytes += heads.size * 2 * (G - 1) * elems * STAT_BYTES
        return total[back]

    return combine


def _epilogue(
    op_name: str,
    alloc: Allocation,
    owners: np.ndarray,
    result: np.ndarray,
    starts: list[np.ndarray],
    pshape: tuple[int, ...],
) -> np.ndarray:
    """Elementwise epilogue over each owner's output partition (bias, activation, mean)."""
    layout = alloc.layout
    expr = layout.expr
    digits = []
    for ix in expr.output.indices:
        axes = merged_axes(ix, layout.extent)
        if axes is None:
            raise DeviceProgramError(f"operator '{short_name(op_name)}': output index {ix} is "
                                     "not a plain axis or axes merged row-major")
        digits.append(axes)
    local = tuple(a.name for a in expr.local_axes)
    # one evaluation dimension per output dimension (named by its outermost digit)
    order = tuple(axes[0] for axes in digits) + local
    nd = len(order)
    lengths = list(pshape) + [layout.local_extent[a] for a in local]
    pos: dict[str, np.ndarray] = {}
    for d, a in enumerate(order):
        view = [1] * (nd + 1)
        view[d + 1] = lengths[d]
        span = np.arange(lengths[d], dtype=np.int64).reshape(view)
        if d >= len(digits):
            pos[a] = span
            continue
        p = span + starts[d].reshape([-1] + [1] * nd)
        # a digit index g*k + f: each axis's value is its digit of the position
        radix = 1
        for b in reversed(digits[d]):
            pos[b] = p // radix if b == digits[d][0] else (p // radix) % layout.extent[b]
            radix *= layout.extent[b]

    def affine(ix: AffineIndex) -> np.ndarray:
        value = np.full([1] * (nd + 1), ix.offset, np.int64)
        for a, c in ix.terms:
            if a not in pos:
                raise DeviceProgramError(
                    f"operator '{short_name(op_name)}': epilogue reads axis '{a}', not an "
                    "output or local axis"
                )
            value = value + c * pos[a]
        return value

    def load(node: dict) -> np.ndarray:
        t = int(node["input"])
        if layout.temporal_axes(t):
            raise DeviceProgramError(
                f"operator '{short_name(op_name)}': epilogue input '{expr.tensors[t].name}' rotates"
            )
        start = layout.partition_start(t, {})
        locs = [affine(ix) - _col(start[d][owners], nd) for d, ix in enumerate(load_index(node))]
        buf = alloc.buffers[t][owners]
        _check_bounds(op_name, expr.tensors[t].name, locs, buf.shape[1:])
        return _gather(buf, locs, nd)

    ev = ExprEvaluator(order, lengths, load, pos.__getitem__,
                       result=result.reshape(result.shape + (1,) * len(local)))
    value = np.asarray(ev.evaluate(expr.epilogue), COMPUTE_DTYPE)
    value = _drop_local(value, len(digits), op_name)
    return np.broadcast_to(value, result.shape)


def _col(per_core: np.ndarray, nd: int) -> np.ndarray:
    """A per-core vector shaped to broadcast against ``[cores, *nd axes]``."""
    return np.asarray(per_core).reshape([-1] + [1] * nd)


def _gather(buf: np.ndarray, locs: list[np.ndarray], nd: int) -> np.ndarray:
    """``buf[c, locs...]`` for every core ``c``: each core reads only its own buffer."""
    core = np.arange(buf.shape[0]).reshape([-1] + [1] * nd)
    return buf[(core, *locs)]


def _check_bounds(op: str, tensor: str, locs: list[np.ndarray], shape: tuple[int, ...]) -> None:
    # a negative local index would silently wrap around in numpy: refuse it instead
    for d, (loc, n) in enumerate(zip(locs, shape)):
        if loc.size and (int(loc.min()) < 0 or int(loc.max()) >= n):
            raise DeviceProgramError(
                f"operator '{op}': a core reads {tensor} dim {d} at [{int(loc.min())}, "
                f"{int(loc.max())}], outside its partition of length {n}"
            )


def _drop_local(value: np.ndarray, n_top: int, op: str) -> np.ndarray:
    """Drop the (size-1) local-axis dimensions of a value; they must have been reduced."""
    extra = value.shape[1 + n_top:]
    if any(n != 1 for n in extra):
        raise DeviceProgramError(f"operator '{op}': a core-local axis is used outside a reduce")
    return value.reshape(value.shape[: 1 + n_top])
