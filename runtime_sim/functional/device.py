"""The functional simulated ICCA device: every core's SRAM, compute and shifts, with data.

T10 §4.4 abstracts a distributed-memory chip with three interfaces, which
:class:`SimulatedDevice` offers with the same names:

* :meth:`~SimulatedDevice.allocate` -- reserve, on every core of an operator, one partition
  of each of its tensors (SRAM is accounted per core, including the shift buffer of T10 §5);
* :meth:`~SimulatedDevice.compute` -- one compute step: every core computes its sub-task
  from its *own* buffers only (:mod:`runtime_sim.functional.expr_eval`);
* :meth:`~SimulatedDevice.shift` -- one rotation: a core receives a partition from another.

Around them, :meth:`~SimulatedDevice.place` puts each tensor in its initial placement
(T10 §4.4 "Sub-tensor placement"), :meth:`~SimulatedDevice.reduce_outputs` sums output
replicas into ring 0 and :meth:`~SimulatedDevice.read_output` applies the epilogue and
assembles the tensor. :meth:`~SimulatedDevice.run` executes a whole region
(:class:`~runtime_sim.contract.program.DeviceProgram`) with these, as the host runtime does.
Operators with a :class:`~runtime_sim.contract.program.VgmPlan` (the load-compute-store baseline on a
virtual global memory, T10 §2.2, Fig. 2a) run through :mod:`runtime_sim.functional.vgm_exec` instead,
with the region's tensors in home slices on every core.

On a chip with HBM, a program may carry Elk's preload/execute stream (Elk §2.2, §4.5;
:class:`~runtime_sim.contract.program.PreloadSchedule`). The device then keeps the call's off-chip
tensors in a host-side *HBM store* and runs the stream's instructions in order:
:meth:`~SimulatedDevice.preload_async` writes each core's chunk of its partitions
(:mod:`runtime_sim.contract.preload_chunks`) into that core's *preload space*, and ``execute`` allocates the
operator's *execution space*, which absorbs its preload space, lets
:meth:`~SimulatedDevice.distribute` assemble every partition from the chunks in the preload
spaces of the core and its peers, places its other inputs and computes. SRAM per core is
execution space + preload space of every operator preloaded and not yet executed + live
activations + the shift buffer, checked at every preload and every allocate.

The state of all cores is held as stacked arrays ``[cores, *partition shape]``, so a step is
a handful of numpy calls whatever the number of cores; nothing is ever computed from a
host-side copy of a tensor, so a wrong placement or shift gives a wrong answer.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from runtime_sim.contract.constants import decode_constant
from runtime_sim.contract.errors import (
    DeviceProgramError,
    InvalidPlanError,
    SramOverflowError,
    UnsupportedDtypeError,
    short_name,
)
from runtime_sim.functional.expr_eval import COMPUTE_DTYPE, ExprEvaluator
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import (
    STAT_BYTES,
    BlockGrid,
    OpLayout,
    ShiftEvent,
    canonical_grid,
    checked_layout,
    input_relayout,
    producer_grid,
)
from runtime_sim.contract.lifetimes import last_reads, outlives, released
from runtime_sim.contract.preload_chunks import OpPreload, distribution, held_chunk, op_preload
from runtime_sim.contract.program import (
    EXECUTE,
    PRELOAD,
    AffineIndex,
    DeviceProgram,
    VgmPlan,
    dtype_bytes,
    gather_rows,
    load_index,
    merged_axes,
)
from runtime_sim.contract.stream import (
    PRODUCED,
    Instruction,
    call_segment,
    has_stream,
    input_sources,
    offchip_inputs,
)
from runtime_sim.functional.vgm_exec import VgmRegion


@dataclass
class _Allocation:
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


@dataclass
class _Preloaded:
    """An operator's off-chip inputs in the preload space of its cores (Elk §4.5
    ``preload_async``): per input, every numbered core's chunk of its partition."""

    name: str
    layout: OpLayout
    info: OpPreload
    chunks: dict[int, np.ndarray]  # input -> [cores, chunk elements] (last chunk zero-padded)
    absorbed: bool = False  # its space became part of the operator's execution space


@dataclass
class _Run:
    """One model invocation: the programs executed, in order, and their statistics.

    Programs that name their module's ``run_order`` are grouped exactly: the run is the
    sequence of regions one call of ``main`` runs (a region may run several times in it).
    Programs without one (hand-written) fall back to "a region seen again starts a new run".
    A call that fails ends its run: the next call starts a new one, whatever its region (a
    failed call of a layer's shared region must not let the next invocation continue the
    broken one).
    """

    module: str = ""
    region_names: set[str] = field(default_factory=set)
    regions: list[dict[str, Any]] = field(default_factory=list)
    programs: list[DeviceProgram] = field(default_factory=list)
    timing: Any = None  # the timing report of ``programs``, computed on first request
    #: preloads issued by earlier calls of the run for the operators of a later call:
    #: call index -> operator indices, in issue order (performed when that call starts)
    pending: dict[int, list[int]] = field(default_factory=dict)
    failed: bool = False  # a call of this run raised: the run is over

    def continues_with(self, program: DeviceProgram) -> bool:
        """Whether ``program`` is the next region of this run (else it starts a new one)."""
        if not self.programs or self.failed:
            return False
        if program.module != self.module:
            return False
        order = program.run_order
        if order:
            position = len(self.programs)
            return position < len(order) and order[position] == program.region
        return program.region not in self.region_names


class SimulatedDevice:
    """A simulated ICCA chip that executes device programs on data (T10 §4.4, §5)."""

    def __init__(self, hw: HardwareSpec | None = None):
        self._hw: HardwareSpec | None = None
        self._allocs: dict[str, _Allocation] = {}
        self._resident: dict[str, np.ndarray] = {}  # on-chip tensors between ops: bytes per core
        self._used = np.zeros(0, np.int64)  # SRAM bytes per core, shift buffer excluded
        self._preload_used = np.zeros(0, np.int64)  # preload space in use, per core
        self._preloads: dict[str, _Preloaded] = {}  # preloaded operators not yet executed
        self._hbm: dict[str, np.ndarray] = {}  # the HBM store of the current call
        self._ideal = False  # design "ideal": preload space has its own SRAM
        self._peaks = [0, 0]  # peak SRAM and preload space per core in the current region
        self._run = _Run()
        self._grids: dict[str, BlockGrid] = {}  # outputs of the region's operators, as placed
        self._env: Mapping[str, np.ndarray] = {}  # tensors of the current call
        self._labels: dict[str, str] = {}  # operator name -> its kind in the user's words
        self._lock = threading.RLock()
        if hw is not None:
            self.configure(hw)

    # -- configuration ------------------------------------------------------------------
    @property
    def hw(self) -> HardwareSpec:
        if self._hw is None:
            raise DeviceProgramError("the simulated device has no HardwareSpec yet (call configure)")
        return self._hw

    def configure(self, hw: HardwareSpec) -> None:
        """Become chip ``hw``. Changing the chip drops everything held on the old one."""
        if self._hw == hw and self._used.size == hw.num_cores:
            return
        self._hw = hw
        self._allocs.clear()
        self._resident.clear()
        self._preloads.clear()
        self._hbm = {}
        self._used = np.zeros(hw.num_cores, np.int64)
        self._preload_used = np.zeros(hw.num_cores, np.int64)

    def sram_used_per_core(self) -> np.ndarray:
        """Bytes of SRAM in use on every core, the reserved shift buffer and the preload
        space included (Elk §2.2: execution space + preload space + buffer)."""
        return self._used + self._preload_used + self.hw.shift_buffer_bytes

    def preload_used_per_core(self) -> np.ndarray:
        """Bytes of preload space in use on every core (operators preloaded, not executed)."""
        return self._preload_used.copy()

    def _sram_check(self, op_name: str, used: np.ndarray, preload: np.ndarray,
                    layout: OpLayout) -> int:
        """Raise :class:`SramOverflowError` if execution space + activations (``used``) +
        preload space + shift buffer exceed a core's SRAM; return the peak core's bytes.
        Design ``"ideal"`` gives preloading its own SRAM: each side is checked alone."""
        hw = self.hw
        exec_side = used + hw.shift_buffer_bytes
        needed = exec_side if self._ideal else exec_side + preload
        for side in (needed, preload) if self._ideal else (needed,):
            over = np.flatnonzero(side > hw.sram_bytes_per_core)
            if over.size:
                core = int(over[0])
                raise SramOverflowError(op_name, core, hw.sram_bytes_per_core, int(side[core]),
                                        label=self._labels.get(op_name, layout.expr.kind),
                                        chip=hw.name, tensors=layout.expr.tensor_summary())
        peak = int(needed.max()) if needed.size else 0
        self._peaks[0] = max(self._peaks[0], peak)
        self._peaks[1] = max(self._peaks[1], int(preload.max()) if preload.size else 0)
        return peak

    # -- T10 §4.4: allocate -------------------------------------------------------------
    def allocate(self, op_name: str, layout: OpLayout) -> None:
        """Reserve one partition of every tensor of ``op_name`` on each of its cores.

        Raises :class:`SramOverflowError` naming the operator and the first core whose
        partitions, plus tensors already held on it, plus the shift buffer (T10 §5
        "multi-copy shift with buffer"), exceed ``hw.sram_bytes_per_core``.
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
            _check_dtype(hw, access.name, access.dtype, f"operator '{short_name(op_name)}'",
                         mask=t < len(layout.expr.inputs), index=t in ids_inputs)
        per_core = layout.memory_bytes_per_core()
        used = self._used.copy()
        if layout.span > hw.num_cores:
            raise InvalidPlanError(
                f"operator '{short_name(op_name)}' is placed up to core {layout.span - 1}, "
                f"but chip '{hw.name}' has {hw.num_cores}"
            )
        used[layout.physical] += per_core
        # a preloaded operator's preload space becomes part of its execution space (its
        # chunks sit where its partitions go): it is not counted twice
        preloaded = self._preloads.get(op_name)
        preload = self._preload_used.copy()
        if preloaded is not None and not preloaded.absorbed:
            if preloaded.layout.num_cores != layout.num_cores or \
                    not np.array_equal(preloaded.layout.physical, layout.physical):
                raise DeviceProgramError(f"operator '{short_name(op_name)}' was preloaded under "
                                         "another layout")
            preload[layout.physical] -= preloaded.info.space_bytes_per_core
        peak = self._sram_check(op_name, used, preload, layout)
        if preloaded is not None:
            preloaded.absorbed = True
            self._preload_used = preload
        n = layout.num_cores
        out = len(layout.expr.tensors) - 1
        buffers = []
        for t, access in enumerate(layout.expr.tensors):
            # the output accumulates in float32, as the AMP unit's accumulators do (T10 §5)
            dtype = COMPUTE_DTYPE if t == out else np.dtype(access.dtype)
            buffers.append(np.zeros((n, *layout.partition_shape(t)), dtype=dtype))
        placed = [False] * len(layout.expr.inputs) + [True]
        self._allocs[op_name] = _Allocation(op_name, layout, buffers, placed, per_core, sram_peak=peak)
        self._used = used

    def free(self, op_name: str) -> None:
        """Release the SRAM of an operator (its preload space too, if it was preloaded)."""
        alloc = self._alloc(op_name)
        self._used[alloc.layout.physical] -= alloc.bytes_per_core
        del self._allocs[op_name]
        preloaded = self._preloads.get(op_name)
        if preloaded is not None and preloaded.absorbed:
            del self._preloads[op_name]

    # -- Elk §4.5: preload_async and distribute --------------------------------------------
    def preload_async(self, op_name: str, layout: OpLayout, inputs: Mapping[int, np.ndarray],
                      chunks: Mapping[int, int] | None = None,
                      ids_values: Mapping[int, np.ndarray] | None = None) -> int:
        """``preload_async(op)``: deliver the operator's off-chip inputs from HBM into the
        preload space of its cores, in the preload state (Elk §4.3): for input ``t`` cut in
        ``s = chunks[t]`` chunks (default 1), every numbered core receives only the chunk
        :func:`~runtime_sim.contract.preload_chunks.held_chunk` of its partition (the same partition
        :meth:`place` builds). ``inputs`` maps input index -> the full tensor as the HBM store
        holds it. Each core reserves :func:`~runtime_sim.contract.preload_chunks.preload_bytes` per input until
        the operator executes; raises :class:`SramOverflowError` the instant execution space,
        live activations, the preload space of every operator preloaded and not yet executed
        and the shift buffer exceed a core's SRAM. Returns the bytes delivered
        (:func:`~runtime_sim.contract.preload_chunks.delivered_bytes`)."""
        hw = self.hw
        if op_name in self._preloads or op_name in self._allocs:
            raise DeviceProgramError(f"operator '{short_name(op_name)}' is already preloaded or allocated")
        if layout.span > hw.num_cores:
            raise InvalidPlanError(
                f"operator '{short_name(op_name)}' is placed up to core {layout.span - 1}, "
                f"but chip '{hw.name}' has {hw.num_cores}"
            )
        arrays = {}
        for t, value in inputs.items():
            if not 0 <= t < len(layout.expr.inputs):
                raise DeviceProgramError(f"tensor {t} of '{short_name(op_name)}' is not an input")
            access = layout.expr.tensors[t]
            _check_dtype(hw, access.name, access.dtype, f"operator '{short_name(op_name)}'", mask=True,
                         index=t in layout.expr.gather_ids)
            arr = np.asarray(value)
            if tuple(arr.shape) != tuple(access.shape) or str(arr.dtype) != access.dtype:
                raise DeviceProgramError(
                    f"operator '{short_name(op_name)}': input '{access.name}' is "
                    f"{arr.dtype}{list(arr.shape)} "
                    f"in HBM, expected {access.dtype}{list(access.shape)}")
            arrays[t] = arr
        rows = {}
        for t in arrays:
            gather = layout.expr.tensors[t].gather
            if gather is not None:
                ids = (ids_values or {}).get(gather.ids)
                rows[t] = _gather_rows(layout, t, arrays[t], ids, op_name)
        info = op_preload(layout, sorted(arrays), dict(chunks or {}))
        preload = self._preload_used.copy()
        preload[layout.physical] += info.space_bytes_per_core
        self._sram_check(op_name, self._used, preload, layout)
        held = {}
        n = layout.num_cores
        for t, s in info.inputs:
            # what HBM sends: each core's chunk of its partition, and nothing more
            flat = _partitions(layout, t, arrays[t], rows.get(t)).reshape(n, -1)
            ce = -(-flat.shape[1] // s)
            padded = np.zeros((n, s * ce), flat.dtype)
            padded[:, :flat.shape[1]] = flat
            held[t] = padded.reshape(n, s, ce)[np.arange(n), held_chunk(layout, t, s)].copy()
        self._preload_used = preload
        self._preloads[op_name] = _Preloaded(op_name, layout, info, held)
        return info.preloaded_bytes

    def distribute(self, op_name: str) -> int:
        """``distribute_data`` of ``execute(op)`` (Elk §4.5): every core of the allocated,
        preloaded operator assembles each preloaded input's partition from the chunk in its
        own preload space and the chunks it reads from the preload space of its block peers
        (:func:`~runtime_sim.contract.preload_chunks.distribution`), into the operator's buffer. Returns the
        bytes moved between cores."""
        alloc = self._alloc(op_name)
        preloaded = self._preloads.get(op_name)
        if preloaded is None or not preloaded.absorbed:
            raise DeviceProgramError(f"operator '{short_name(op_name)}' was not preloaded and allocated")
        layout = alloc.layout
        n = layout.num_cores
        cores = np.arange(n)
        moved = 0
        for t, s in preloaded.info.inputs:
            pre = preloaded.chunks[t]  # [cores, chunk elements]
            ce = pre.shape[1]
            pshape = layout.partition_shape(t)
            elems = int(np.prod(pshape, dtype=np.int64))
            buf = np.zeros((n, s, ce), pre.dtype)
            buf[cores, held_chunk(layout, t, s)] = pre[cores]  # its own chunk, in place
            d = distribution(layout, t, s)
            buf[d.dst, d.chunk] = pre[d.src]  # read from the peer's preload space
            moved += d.total_bytes
            alloc.buffers[t] = buf.reshape(n, s * ce)[:, :elems].reshape((n, *pshape)).copy()
            alloc.placed[t] = True
        del self._preloads[op_name]
        return moved

    def buffers(self, op_name: str) -> list[np.ndarray]:
        """The stacked per-core buffers of an operator (inputs, then the output accumulator)."""
        return self._alloc(op_name).buffers

    # -- T10 §4.4: initial placement ------------------------------------------------------
    def place(self, op_name: str, tensor: int, array: np.ndarray,
              ids: np.ndarray | None = None) -> int:
        """Put every core's initial partition of input ``tensor`` in its buffer.

        Positions outside the tensor (padding of a sub-operator, convolution padding read
        through negative offsets) are zero. A gathered input needs ``ids``, the values of
        its ids input: every core receives the rows they pick for its block of the view.
        Returns the bytes written to SRAM.
        """
        alloc = self._alloc(op_name)
        layout = alloc.layout
        access = layout.expr.tensors[tensor]
        if tensor >= len(layout.expr.inputs):
            raise DeviceProgramError(f"tensor {tensor} of '{short_name(op_name)}' is not an input")
        arr = np.asarray(array)
        if tuple(arr.shape) != tuple(access.shape):
            raise DeviceProgramError(
                f"operator '{short_name(op_name)}': input '{access.name}' has shape {list(arr.shape)}, "
                f"expected {list(access.shape)}"
            )
        alloc.buffers[tensor] = _partitions(layout, tensor, arr,
                                            _gather_rows(layout, tensor, arr, ids, op_name))
        alloc.placed[tensor] = True
        return layout.num_cores * layout.partition_bytes(tensor)

    # -- T10 §4.4: compute --------------------------------------------------------------
    def compute(self, op_name: str, counters: Mapping[str, int]) -> None:
        """One compute step on every core: the sub-task at loop ``counters`` (T10 §4.2).

        Each core reads the chunk of each input from its own buffer (global chunk index
        from :meth:`OpLayout.chunk_index` minus the start of the partition it holds at this
        step) and adds the sub-task's result into its own output partition.
        """
        alloc = self._alloc(op_name)
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
                           combine=self._combiner(alloc) if layout.local_follow else None)
        if expr.reduce_axes:
            value = ev.evaluate_reduce(expr.body, expr.reduce_axes, expr.combiner)
        else:
            value = ev.evaluate(expr.body)
        value = _drop_local(np.asarray(value, COMPUTE_DTYPE), len(top), op_name)

        out = len(expr.tensors) - 1
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

    def _combiner(self, alloc: _Allocation):
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

    # -- T10 §4.4: shift ----------------------------------------------------------------
    def shift(self, op_name: str, event: ShiftEvent) -> int:
        """Rotate partitions of one tensor: core ``c`` receives the partition of ``event.source[c]``.

        Returns the bytes received over the interconnect (moving cores x partition bytes).
        """
        alloc = self._alloc(op_name)
        source = np.asarray(event.source)
        if source.shape != (alloc.layout.num_cores,):
            raise DeviceProgramError(f"shift of '{short_name(op_name)}' has {source.shape} sources")
        alloc.buffers[event.tensor] = alloc.buffers[event.tensor][source]
        moved = int(np.count_nonzero(event.moving)) * alloc.layout.partition_bytes(event.tensor)
        alloc.shift_bytes += moved
        return moved

    def run_steps(self, op_name: str) -> int:
        """All compute-shift steps of an operator (T10 §4.2 nested loops); returns shift bytes."""
        layout = self._alloc(op_name).layout
        moved = 0
        for counters, advancing in layout.counters():
            self.compute(op_name, counters)
            for event in layout.shifts_after(counters, advancing):
                moved += self.shift(op_name, event)
        return moved

    # -- after the steps ----------------------------------------------------------------
    def reduce_outputs(self, op_name: str) -> int:
        """Sum the output replicas of all rings into ring 0; returns the bytes sent.

        Replicas exist when a reduction axis is split across cores (partial sums).
        """
        alloc = self._alloc(op_name)
        if alloc.reduced:
            return 0
        layout = alloc.layout
        out = len(layout.expr.tensors) - 1
        owner_of = layout.output_owner_of()
        owners = layout.owners()
        sent = 0
        if owners.size != layout.num_cores:
            buf = alloc.buffers[out]
            order = np.argsort(owner_of, kind="stable")
            sorted_owner = owner_of[order]
            heads = np.flatnonzero(np.r_[True, sorted_owner[1:] != sorted_owner[:-1]])
            summed = np.add.reduceat(buf[order], heads, axis=0)
            reduced = np.zeros_like(buf)  # non-owners have sent their partial sums away
            reduced[sorted_owner[heads]] = summed
            alloc.buffers[out] = reduced
            sent = (layout.num_cores - owners.size) * layout.partition_bytes(out)
        alloc.reduction_bytes += sent
        alloc.reduced = True
        return sent

    def read_output(self, op_name: str) -> np.ndarray:
        """Apply the epilogue on ring-0 cores and assemble the output tensor from them.

        Partitions are cropped to the tensor (padding dropped) and rounded to its dtype.
        """
        alloc = self._alloc(op_name)
        if not alloc.reduced:
            self.reduce_outputs(op_name)
        layout = alloc.layout
        expr = layout.expr
        access = expr.output
        out = len(expr.tensors) - 1
        owners = layout.owners()
        pshape = layout.partition_shape(out)
        starts = [s[owners] for s in layout.partition_start(out, layout.partition(out, layout.chunk({})))]
        value = alloc.buffers[out][owners]
        if expr.epilogue is not None:
            value = self._epilogue(op_name, alloc, owners, value, starts, pshape)
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

    def _epilogue(
        self,
        op_name: str,
        alloc: _Allocation,
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

    # -- whole regions --------------------------------------------------------------------
    def run(self, program: DeviceProgram | Mapping[str, Any] | str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Execute one offloaded region on data and return its outputs (T10 §4.4, §5).

        Region inputs, constants and outputs of earlier operators of the region are placed
        in each operator's initial placement; intermediates stay on chip between operators
        (their SRAM is held on the producer's ring-0 cores) and placing them is counted as
        re-layout traffic (T10 §5: "the program may rearrange the data on cores").

        A program with a preload schedule (Elk §4.5) runs its call's segment of the stream
        instead, instruction by instruction (:meth:`_execute`); the segment is checked
        against the run so far (:func:`runtime_sim.contract.stream.call_segment`) before any data
        moves.
        """
        if isinstance(program, str):
            program = DeviceProgram.from_json(program)
        elif not isinstance(program, DeviceProgram):
            program = DeviceProgram.from_dict(program)
        hw = HardwareSpec.from_dict(program.hardware)
        program.validate(hw)  # the one program check, shared with the timing simulators
        with self._lock:
            self.configure(hw)
            continuing = self._run.continues_with(program)
            call = len(self._run.programs) if continuing else 0
            self._run.failed = True  # until this call is recorded
            instructions: list[Instruction] | None = None
            later: list[Instruction] = []
            if continuing:
                has_stream([*self._run.programs, program])  # all of a run, or none
            if program.preload_schedule is not None:
                if any(isinstance(op.plan, VgmPlan) for op in program.ops):
                    raise DeviceProgramError(
                        f"region '{short_name(program.region)}': load-compute-store (VGM) operators do not "
                        "run a preload schedule")
                carried = self._run.pending.get(call, []) if continuing else []
                instructions, later = call_segment(program, call, len(program.run_order) or None,
                                                   carried, hw.hbm_bandwidth > 0)
            env, input_bytes = self._region_inputs(program, inputs)
            stats = self._execute(program, env, instructions)
            stats["input_bytes"] = input_bytes
            outputs = []
            for name in program.outputs:
                if name not in env:
                    raise DeviceProgramError(f"region '{short_name(program.region)}' never "
                                             f"computes output '{short_name(name)}'")
                outputs.append(env[name])
            stats["output_bytes"] = int(sum(o.nbytes for o in outputs))
            self._record(program, stats, continuing)
            for ins in later:
                self._run.pending.setdefault(ins.call, []).append(ins.op)
            return outputs

    def _region_inputs(self, program: DeviceProgram, inputs: Sequence[np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
        hw = self.hw
        where = f"region '{short_name(program.region)}'"
        if len(inputs) != len(program.inputs):
            raise DeviceProgramError(
                f"{where} takes {len(program.inputs)} inputs, got {len(inputs)}"
            )
        env: dict[str, np.ndarray] = {}
        nbytes = 0
        for decl, value in zip(program.inputs, inputs):
            _check_dtype(hw, decl.name, decl.dtype, where, mask=True, index=True)
            arr = np.asarray(value)
            if str(arr.dtype) != decl.dtype:
                raise UnsupportedDtypeError(
                    f"{where}: input '{decl.name}' is {arr.dtype}, but the program declares {decl.dtype}"
                )
            if tuple(arr.shape) != tuple(decl.shape):
                raise DeviceProgramError(
                    f"{where}: input '{decl.name}' has shape {list(arr.shape)}, expected {list(decl.shape)}"
                )
            env[decl.name] = arr
            nbytes += arr.nbytes
        for name, entry in program.constants.items():
            arr = decode_constant(name, entry)
            _check_dtype(hw, name, str(arr.dtype), where, mask=True, index=True)
            env[name] = arr
            nbytes += arr.nbytes
        return env, nbytes

    def _execute(self, program: DeviceProgram, env: dict[str, np.ndarray],
                 instructions: Sequence[Instruction] | None = None) -> dict[str, Any]:
        """Run a region's operators in program order, or, with ``instructions`` (this call's
        checked preload stream, :func:`runtime_sim.contract.stream.call_segment`), exactly in stream
        order: ``preload`` moves the operator's off-chip inputs from the HBM store into the
        preload space of its cores (:meth:`preload_async`); ``execute`` allocates it,
        distributes the preloaded inputs (:meth:`distribute`), places the others as without a
        stream, and computes.

        Preloads an earlier call issued for this call's operators come first in
        ``instructions``: the VM hands the device one region's inputs per call, so that data
        does not exist on the device before this call starts; the functional device performs
        them here, before the call's first instruction (and counts their preload space from
        here), while the timing simulator times them where the stream issues them.
        """
        hw = self.hw
        ops = program.ops
        self._labels = {op.name: op.label or op.expr.kind for op in ops}
        last_use = last_reads([op.input_names for op in ops], program.outputs)
        produced: set[str] = set()
        op_stats: list[dict[str, Any] | None] = [None] * len(ops)
        stream = instructions is not None
        offchip = offchip_inputs(program, hw.hbm_bandwidth > 0) if stream else [[] for _ in ops]
        preloaded: dict[int, int] = {}  # operator -> bytes its preload delivered
        layouts: dict[int, OpLayout] = {}
        if stream:
            # every layout and chunk count is checked before any data moves
            for ins in instructions:
                if ins.op not in layouts:
                    layouts[ins.op] = checked_layout(ops[ins.op], hw)
                    op_preload(layouts[ins.op], offchip[ins.op], op=ops[ins.op])
            self._hbm = {name: env[name] for j, op in enumerate(ops)
                         for t, name in enumerate(op.input_names) if t in offchip[j]}
        sources = input_sources(program, hw.hbm_bandwidth > 0)
        self._grids = {}
        self._env = env  # gather ids of preloaded inputs are read from the call's tensors
        order = instructions if stream else [Instruction(EXECUTE, 0, i) for i in range(len(ops))]
        self._ideal = stream and program.preload_schedule.design == "ideal"
        self._peaks = [0, 0]
        # load-compute-store operators (T10 §2.2) keep every tensor in a VGM region, reserved
        # on every core for the whole region
        vgm = VgmRegion(program, hw) if any(isinstance(op.plan, VgmPlan) for op in ops) else None
        if vgm is not None:
            self._used += vgm.bytes_per_core
        try:
            for ins in order:
                i, op = ins.op, ops[ins.op]
                if ins.kind == PRELOAD:
                    self._preload_op(i, op, layouts[i], offchip[i], preloaded)
                    continue
                # tensors this op reads for the last time move into its partitions
                for name in released(last_use, self._resident, i):
                    self._release(name)
                if vgm is not None and isinstance(op.plan, VgmPlan):
                    env[op.output_name], vgm_stats = vgm.run_op(op, env, produced, self._used)
                    op_stats[i] = vgm_stats.to_dict()
                    produced.add(op.output_name)
                    continue
                layout = layouts[i] if i in layouts else checked_layout(op, self.hw)
                space = self._preloads[op.name].info.space_bytes_per_core if i in preloaded else 0
                op_stats[i] = self._execute_op(op, layout, env, produced,
                                               offchip[i] if i in preloaded else [], sources[i])
                if i in preloaded:
                    op_stats[i]["preloaded_bytes"] = preloaded[i]
                    op_stats[i]["preload_bytes_per_core"] = space
                if outlives(last_use, op.output_name, i):
                    out = len(op.expr.tensors) - 1
                    self._hold(op.output_name, layout.physical[layout.owners()], layout.partition_bytes(out))
        finally:  # leave the chip as this region found it, even after an error
            for name in {op.name for op in ops} & set(self._allocs):
                self.free(name)
            for name in list(self._preloads):
                self._drop_preload(name)
            for name in list(self._resident):
                self._release(name)
            if vgm is not None:
                self._used -= vgm.bytes_per_core
            self._hbm = {}
            self._env = {}
            self._grids = {}
            self._ideal = False
        op_stats = [s for s in op_stats if s is not None]
        peak = max([s["sram_bytes_per_core"] for s in op_stats] + [self._peaks[0]])
        return {
            "region": program.region,
            "ops": op_stats,
            "cores_used": max((s["cores"] for s in op_stats), default=0),
            "steps": sum(s["steps"] for s in op_stats),
            "rotation_bytes": sum(s["rotation_bytes"] for s in op_stats),
            "reduction_bytes": sum(s["reduction_bytes"] for s in op_stats),
            "shift_bytes": sum(s["shift_bytes"] for s in op_stats),
            "relayout_bytes": sum(s["relayout_bytes"] for s in op_stats),
            "host_bytes": sum(s["host_bytes"] for s in op_stats),
            "fetch_bytes": sum(s.get("fetch_bytes", 0) for s in op_stats),
            "store_bytes": sum(s.get("store_bytes", 0) for s in op_stats),
            "preloaded_bytes": sum(s.get("preloaded_bytes", 0) for s in op_stats),
            "distributed_bytes": sum(s.get("distributed_bytes", 0) for s in op_stats),
            "preloads": sum(1 for ins in order if ins.kind == PRELOAD) if stream else 0,
            "executes": len(ops) if stream else 0,
            "peak_sram_bytes_per_core": peak if op_stats else 0,
            "peak_preload_bytes_per_core": self._peaks[1],
            "sram_bytes_per_core_budget": hw.sram_bytes_per_core,
        }

    def _preload_op(self, index: int, op, layout: OpLayout, inputs: Sequence[int],
                    preloaded: dict[int, int]) -> None:
        """``preload_async`` of one operator of the current call from the HBM store."""
        hbm = {}
        for t in inputs:
            name = op.input_names[t]
            if name not in self._hbm:
                raise DeviceProgramError(f"operator '{short_name(op.name)}' preloads "
                                         f"'{short_name(name)}', which is not in HBM")
            hbm[t] = self._hbm[name]
        ids = {}
        for t in inputs:
            gather = op.expr.inputs[t].gather
            if gather is not None:
                ids_name = op.input_names[gather.ids]
                if ids_name not in self._env:
                    raise DeviceProgramError(f"operator '{short_name(op.name)}' preloads gathered "
                                             f"'{short_name(op.input_names[t])}', but its ids "
                                             f"'{short_name(ids_name)}' are not known before it runs")
                ids[gather.ids] = self._env[ids_name]
        preloaded[index] = self.preload_async(op.name, layout, hbm,
                                              {t: op.chunks_of(t) for t in inputs}, ids)

    def _drop_preload(self, name: str) -> None:
        preloaded = self._preloads.pop(name)
        if not preloaded.absorbed:
            self._preload_used[preloaded.layout.physical] -= preloaded.info.space_bytes_per_core

    def _execute_op(self, op, layout: OpLayout, env: dict[str, np.ndarray], produced: set[str],
                    distributed: Sequence[int], sources: Sequence[str] = ()) -> dict[str, Any]:
        """``execute`` of one compute-shift operator: allocate; distribute its preloaded
        inputs (``distributed``, when it was preloaded) and place the others; compute.

        A gathered input (an embedding lookup) is placed from the rows its ids pick; when the
        table is on chip (``sources``: produced in the region, or a ``"chip"`` or
        ``"resident"`` region input, which rests spread), the rows each core receives from
        the cores holding them are counted exactly from the call's ids
        (:func:`~runtime_sim.contract.layout.gather_relayout`): ``gather_bytes`` moved between cores,
        ``gather_local_bytes`` already in place."""
        self.allocate(op.name, layout)
        moved = self.distribute(op.name) if op.name in self._preloads else 0
        relayout = host = 0
        gather_moved = gather_local = 0.0
        for t, name in enumerate(op.input_names):
            if name not in env:
                raise DeviceProgramError(f"operator '{short_name(op.name)}' reads unknown "
                                         f"tensor '{short_name(name)}'")
            access = op.expr.inputs[t]
            if str(env[name].dtype) != access.dtype:
                raise DeviceProgramError(
                    f"operator '{short_name(op.name)}' reads '{short_name(name)}' as "
                    f"{access.dtype}, it is {env[name].dtype}"
                )
            if t in distributed:
                continue
            gather = access.gather
            ids = env.get(op.input_names[gather.ids]) if gather is not None else None
            written = self.place(op.name, t, env[name], ids)
            if name in produced:
                relayout += written
            else:
                host += written
            if gather is not None:
                grid = self._table_grid(name, access, sources[t] if t < len(sources) else "host")
                if grid is not None:
                    rows = gather_rows(ids, access.shape[gather.axis], gather.mode)
                    chips = np.arange(self.hw.num_cores) // self.hw.cores_per_chip
                    rl = input_relayout(grid, layout, t, chips, self.hw.num_chips, rows)
                    gather_moved += rl.moved_bytes
                    gather_local += rl.local_bytes
        self.run_steps(op.name)
        self.reduce_outputs(op.name)
        result = self.read_output(op.name)
        alloc = self._allocs[op.name]
        stats = {
            "op": op.name,
            "kind": op.expr.kind,
            "cores": layout.num_cores,
            "steps": alloc.steps,
            "rotation_bytes": alloc.shift_bytes,
            "reduction_bytes": alloc.reduction_bytes,
            "shift_bytes": alloc.shift_bytes + alloc.reduction_bytes,
            "relayout_bytes": relayout,
            "host_bytes": host,
            "sram_bytes_per_core": alloc.sram_peak,
        }
        if distributed:
            stats["distributed_bytes"] = moved
        if any(a.gather is not None for a in op.expr.inputs):
            stats["gather_bytes"] = gather_moved
            stats["gather_local_bytes"] = gather_local
        self._grids[op.output_name] = producer_grid(layout)
        self.free(op.name)
        env[op.output_name] = result
        produced.add(op.output_name)
        return stats

    def _table_grid(self, name: str, access: Any, source: str) -> BlockGrid | None:
        """Where a gathered table sits on the cores before its operator runs (``None``: off
        chip, and only the picked rows are sent): its producer's output blocks, or spread
        over the chip for a region input already there (:func:`~runtime_sim.contract.layout.rests_spread`)."""
        if source == PRODUCED:
            return self._grids.get(name)
        if source in ("chip", "resident"):
            return canonical_grid(tuple(access.shape), dtype_bytes(access.dtype), self.hw.num_cores)
        return None

    def _hold(self, name: str, cores: np.ndarray, nbytes: int) -> None:
        per_core = np.zeros(self.hw.num_cores, np.int64)
        per_core[cores] = nbytes
        self._resident[name] = per_core
        self._used += per_core

    def _release(self, name: str) -> None:
        self._used -= self._resident.pop(name)

    # -- statistics -----------------------------------------------------------------------
    def _record(self, program: DeviceProgram, stats: dict[str, Any], continuing: bool) -> None:
        if continuing:
            self._run.failed = False
        else:
            self._run = _Run(module=program.module)
        self._run.region_names.add(program.region)
        self._run.regions.append(stats)
        self._run.programs.append(program)
        self._run.timing = None

    def reset_stats(self) -> None:
        """Start a new run: the next region executed is the first of a fresh run."""
        with self._lock:
            self._run = _Run()

    def last_run_stats(self, *, timing: bool = True) -> dict[str, Any]:
        """Statistics of the current (latest) run, one model invocation.

        ``shift_bytes`` counts rotations and replica reductions; ``relayout_bytes`` the
        placing of on-chip intermediates; ``fetch_bytes`` and ``store_bytes`` the traffic of
        VGM operators (tile loads from home slices, epilogue inputs included, and output
        tiles stored home); ``peak_sram_bytes_per_core`` includes the shift buffer (and the
        VGM region) and the preload space; ``regions`` has the per-region (and per-operator)
        details.

        Runs of programs with a preload schedule (Elk §4.5) also count ``preloads`` and
        ``executes`` (stream instructions performed), ``preloaded_bytes`` (what preloads
        wrote into preload space, :func:`runtime_sim.contract.preload_chunks.delivered_bytes` summed) and
        ``distributed_bytes`` (what distribution moved between cores,
        :attr:`~runtime_sim.contract.preload_chunks.Distribution.total_bytes`), per operator too:
        :func:`runtime_sim.contract.preload_chunks.op_preload`, the count the timing simulator reports.
        ``peak_preload_bytes_per_core`` is the most preload space a core held.
        ``tuned_ops`` names the operators of the run whose plan came from tuning records
        (:attr:`~runtime_sim.contract.program.OpProgram.tuned`), each once. Under design
        ``"ideal"`` preloading has its own SRAM: ``peak_sram_bytes_per_core`` is then the
        execution side alone. All are 0 without a stream.

        With ``timing`` (the default), ``simulated_s`` is the time the run takes on the chip
        and ``simulated_ops`` its per-operator breakdown: the timing simulator run over
        exactly the programs that executed, in call order, with their input sources
        (:meth:`last_run_timing`).
        """
        with self._lock:
            stats = self._counters()
            if timing and self._run.programs:
                report = self.last_run_timing()
                stats["simulated_s"] = float(report.total_s)
                stats["simulated_ops"] = _per_op_timing(report)
            return stats

    def last_run_timing(self) -> Any:
        """The timing report of the latest run (:func:`runtime_sim.timing.simulate_timing`,
        or :func:`runtime_sim.timing.vgm_timing.simulate_vgm_timing` for load-compute-store programs);
        ``write_trace(path)`` on it writes the run's Chrome/Perfetto trace."""
        with self._lock:
            run = self._run
            if not run.programs:
                raise DeviceProgramError("no device program has run yet: nothing to time")
            if run.timing is None:
                run.timing = _simulate(run.programs)
            return run.timing

    def _counters(self) -> dict[str, Any]:
        regions = [dict(r) for r in self._run.regions]
        total = lambda key: int(sum(r[key] for r in regions))  # noqa: E731
        peak = lambda key: int(max((r[key] for r in regions), default=0))  # noqa: E731
        return {
            "regions_executed": len(regions),
            "cores_used": peak("cores_used"),
            "peak_sram_bytes_per_core": peak("peak_sram_bytes_per_core"),
            "shift_bytes": total("shift_bytes"),
            "rotation_bytes": total("rotation_bytes"),
            "reduction_bytes": total("reduction_bytes"),
            "relayout_bytes": total("relayout_bytes"),
            "host_bytes": total("host_bytes"),
            "fetch_bytes": total("fetch_bytes"),
            "store_bytes": total("store_bytes"),
            "input_bytes": total("input_bytes"),
            "output_bytes": total("output_bytes"),
            "steps": total("steps"),
            "preloaded_bytes": total("preloaded_bytes"),
            "distributed_bytes": total("distributed_bytes"),
            "preloads": total("preloads"),
            "executes": total("executes"),
            "peak_preload_bytes_per_core": peak("peak_preload_bytes_per_core"),
            # operators whose plan came from tuning records (OpProgram.tuned), once each
            "tuned_ops": list(dict.fromkeys(op.name for p in self._run.programs for op in p.ops
                                            if op.tuned)),
            "regions": regions,
        }

    def _alloc(self, op_name: str) -> _Allocation:
        try:
            return self._allocs[op_name]
        except KeyError:
            raise DeviceProgramError(f"operator '{short_name(op_name)}' is not allocated") from None


# -- helpers ----------------------------------------------------------------------------------
def _partitions(layout: OpLayout, tensor: int, arr: np.ndarray,
                rows: np.ndarray | None = None) -> np.ndarray:
    """Every numbered core's initial partition of input ``tensor`` of the full tensor ``arr``
    (T10 §4.4 placement), ``[cores, *partition shape]``; positions outside the tensor are 0.

    A gathered input (:class:`~runtime_sim.contract.program.Gather`) is partitioned in its gathered
    view: the core's block of view positions, each reading row ``rows[ids position]`` of
    ``arr`` (``rows``: the call's ids resolved by :func:`~runtime_sim.contract.program.gather_rows`)."""
    access = layout.expr.tensors[tensor]
    p0 = layout.partition(tensor, layout.chunk({}))
    starts = layout.partition_start(tensor, p0)
    pshape = layout.partition_shape(tensor)
    shape = layout.expr.access_shape(tensor)
    n = layout.num_cores
    if not pshape:
        return np.broadcast_to(arr.astype(access.dtype), (n,)).copy()
    nd = len(pshape)
    index, valid = [], np.ones([1] * (nd + 1), bool)
    for d, (start, length) in enumerate(zip(starts, pshape)):
        view = [1] * (nd + 1)
        view[d + 1] = length
        pos = start.reshape([-1] + [1] * nd) + np.arange(length).reshape(view)
        valid = valid & (pos >= 0) & (pos < shape[d])
        index.append(np.clip(pos, 0, max(shape[d] - 1, 0)))
    gather = getattr(access, "gather", None)
    if gather is not None:
        if rows is None:
            raise DeviceProgramError(f"input '{access.name}' is gathered: placing it needs its ids")
        k = rows.ndim
        picked = rows[tuple(index[gather.axis:gather.axis + k])] if rows.size else index[gather.axis]
        index = index[:gather.axis] + [picked] + index[gather.axis + k:]
    gathered = arr[tuple(index)] if arr.size else np.zeros(valid.shape, arr.dtype)
    buf = np.where(valid, gathered, 0).astype(access.dtype)
    return np.broadcast_to(buf, (n, *pshape)).copy()


def _gather_rows(layout: OpLayout, tensor: int, arr: np.ndarray, ids: np.ndarray | None,
                 op_name: str) -> np.ndarray | None:
    """The table rows a gathered input's ids pick (``None`` for other inputs)."""
    gather = getattr(layout.expr.tensors[tensor], "gather", None)
    if gather is None:
        return None
    if ids is None:
        raise DeviceProgramError(f"operator '{short_name(op_name)}': input "
                                 f"'{layout.expr.tensors[tensor].name}' is gathered: placing it needs its ids")
    try:
        return gather_rows(ids, int(np.asarray(arr).shape[gather.axis]), gather.mode)
    except DeviceProgramError as err:
        raise DeviceProgramError(f"operator '{short_name(op_name)}': {err}") from None


def _check_dtype(hw: HardwareSpec, name: str, dtype: str, where: str, mask: bool = False,
                 index: bool = False) -> None:
    """``mask``: the tensor is only read, so it may be a bool mask (``MASK_DTYPES``);
    ``index``: it may hold gather ids (``INDEX_DTYPES``)."""
    hw.check_dtype(dtype, f"{where}: tensor '{short_name(name)}'", mask=mask, index=index)
    dtype_bytes(dtype)  # known size, or DeviceProgramError


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


# -- the process-wide device ------------------------------------------------------------------
_DEVICE: SimulatedDevice | None = None
_DEVICE_LOCK = threading.Lock()


def get_device() -> SimulatedDevice:
    """The device of this process (the one process-wide state of the simulator)."""
    global _DEVICE
    with _DEVICE_LOCK:
        if _DEVICE is None:
            _DEVICE = SimulatedDevice()
        return _DEVICE


def last_run_stats(*, timing: bool = True) -> dict[str, Any]:
    """:meth:`SimulatedDevice.last_run_stats` of the process-wide device."""
    return get_device().last_run_stats(timing=timing)


def last_run_timing() -> Any:
    """:meth:`SimulatedDevice.last_run_timing` of the process-wide device."""
    return get_device().last_run_timing()


def _simulate(programs: Sequence[DeviceProgram]) -> Any:
    # Imported on first use: timing is the other half of the device, not needed to run.
    # pylint: disable=import-outside-toplevel
    if any(isinstance(op.plan, VgmPlan) for p in programs for op in p.ops):
        from runtime_sim.timing.vgm_timing import simulate_vgm_timing

        return simulate_vgm_timing(programs)
    from runtime_sim.timing import simulate_timing

    return simulate_timing(programs)


def _per_op_timing(report: Any) -> list[dict[str, Any]]:
    """Per operator of a timing report: name and seconds (with the report's breakdown)."""
    rows = []
    for entry in report.per_op:
        if isinstance(entry, tuple):  # VGM: (name, VgmTiming)
            name, timing = entry
            rows.append({"op": name, "time_s": timing.time_s, **dataclasses.asdict(timing)})
        else:
            row = entry.to_dict()
            rows.append({"op": row.pop("name"), "time_s": entry.duration_s, **row})
    return rows


def reset_stats() -> None:
    """:meth:`SimulatedDevice.reset_stats` of the process-wide device."""
    get_device().reset_stats()
