"""The preload store: off-chip inputs delivered into the cores' preload space ahead of execution.

On a chip with HBM, a program may carry Elk's preload/execute stream (Elk §2.2, §4.5;
:class:`~runtime_sim.contract.program.PreloadSchedule`). The device then keeps the call's
off-chip tensors in a host-side *HBM store* (:attr:`PreloadStore.hbm`), and
:meth:`PreloadStore.preload_async` writes each core's chunk of its partitions
(:mod:`runtime_sim.contract.preload_chunks`) into that core's *preload space*, in the preload
state (Elk §4.3). ``execute`` allocates the operator's *execution space*, which absorbs its
preload space (:meth:`PreloadStore.absorbed_space`), and :meth:`PreloadStore.distribute`
assembles every partition from the chunks in the preload spaces of the core and its peers.
The preload space is counted in the :class:`~runtime_sim.functional.sram.SramLedger` from the
preload until the operator executes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError, InvalidPlanError, short_name
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.preload_chunks import OpPreload, distribution, held_chunk, op_preload
from runtime_sim.functional.placement import check_dtype, gathered_rows, partitions
from runtime_sim.functional.sram import SramLedger


@dataclass
class Preloaded:
    """An operator's off-chip inputs in the preload space of its cores (Elk §4.5
    ``preload_async``): per input, every numbered core's chunk of its partition."""

    name: str
    layout: OpLayout
    info: OpPreload
    chunks: dict[int, np.ndarray]  # input -> [cores, chunk elements] (last chunk zero-padded)
    absorbed: bool = False  # its space became part of the operator's execution space


class PreloadStore(Mapping[str, Preloaded]):
    """The operators preloaded and not yet executed, by name, and the HBM store of the call.

    Attributes
    ----------
    hbm
        The HBM store of the current call: tensor name -> the full tensor, as HBM holds it.
    """

    def __init__(self, sram: SramLedger) -> None:
        self._sram = sram
        self._preloaded: dict[str, Preloaded] = {}
        self.hbm: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> Preloaded:
        return self._preloaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._preloaded)

    def __len__(self) -> int:
        return len(self._preloaded)

    def clear(self) -> None:
        """Forget every preload and the HBM store (the chip changed)."""
        self._preloaded.clear()
        self.hbm = {}

    def preload_async(self, op_name: str, layout: OpLayout, inputs: Mapping[int, np.ndarray],
                      chunks: Mapping[int, int] | None = None,
                      ids_values: Mapping[int, np.ndarray] | None = None,
                      *, allocated: bool = False) -> int:
        """``preload_async(op)``: deliver the operator's off-chip inputs from HBM into the
        preload space of its cores, in the preload state (Elk §4.3): for input ``t`` cut in
        ``s = chunks[t]`` chunks (default 1), every numbered core receives only the chunk
        :func:`~runtime_sim.contract.preload_chunks.held_chunk` of its partition (the same partition
        :func:`~runtime_sim.functional.placement.partitions` places). ``inputs`` maps input index ->
        the full tensor as the HBM store holds it. Each core reserves
        :func:`~runtime_sim.contract.preload_chunks.preload_bytes` per input until the operator
        executes; raises :class:`SramOverflowError` the instant execution space, live
        activations, the preload space of every operator preloaded and not yet executed and
        the shift buffer exceed a core's SRAM. ``allocated``: the operator is already
        allocated (an error, as being preloaded already is). Returns the bytes delivered
        (:func:`~runtime_sim.contract.preload_chunks.delivered_bytes`)."""
        sram = self._sram
        hw = sram.hw
        if op_name in self._preloaded or allocated:
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
            check_dtype(hw, access.name, access.dtype, f"operator '{short_name(op_name)}'", mask=True,
                        index=t in layout.expr.gather_ids)
            arr = np.asarray(value)
            if tuple(arr.shape) != access.tensor_shape or str(arr.dtype) != access.dtype:
                raise DeviceProgramError(
                    f"operator '{short_name(op_name)}': input '{access.name}' is "
                    f"{arr.dtype}{list(arr.shape)} "
                    f"in HBM, expected {access.dtype}{list(access.tensor_shape)}")
            arrays[t] = arr
        rows = {}
        for t, arr in arrays.items():
            gather = layout.expr.tensors[t].gather
            if gather is not None:
                ids = (ids_values or {}).get(gather.ids)
                rows[t] = gathered_rows(layout, t, arr, ids, op_name)
        info = op_preload(layout, sorted(arrays), dict(chunks or {}))
        preload = sram.preload.copy()
        preload[layout.physical] += info.space_bytes_per_core
        sram.check(op_name, sram.used, preload, layout)
        held = {}
        n = layout.num_cores
        for t, s in info.inputs:
            # what HBM sends: each core's chunk of its partition, and nothing more
            flat = partitions(layout, t, arrays[t], rows.get(t)).reshape(n, -1)
            ce = -(-flat.shape[1] // s)
            padded = np.zeros((n, s * ce), flat.dtype)
            padded[:, :flat.shape[1]] = flat
            held[t] = padded.reshape(n, s, ce)[np.arange(n), held_chunk(layout, t, s)].copy()
        sram.preload = preload
        self._preloaded[op_name] = Preloaded(op_name, layout, info, held)
        return info.preloaded_bytes

    def absorbed_space(self, op_name: str, layout: OpLayout) -> np.ndarray:
        """The preload space per core once operator ``op_name``, about to be allocated under
        ``layout``, has its preload space absorbed into its execution space (its chunks sit
        where its partitions go, so they are not counted twice). A copy: nothing changes until
        :meth:`absorb`."""
        preloaded = self._preloaded.get(op_name)
        preload = self._sram.preload.copy()
        if preloaded is not None and not preloaded.absorbed:
            if preloaded.layout.num_cores != layout.num_cores or \
                    not np.array_equal(preloaded.layout.physical, layout.physical):
                raise DeviceProgramError(f"operator '{short_name(op_name)}' was preloaded under "
                                         "another layout")
            preload[layout.physical] -= preloaded.info.space_bytes_per_core
        return preload

    def absorb(self, op_name: str, preload: np.ndarray) -> None:
        """Commit :meth:`absorbed_space` (``preload``) once the allocation fits."""
        preloaded = self._preloaded.get(op_name)
        if preloaded is not None:
            preloaded.absorbed = True
            self._sram.preload = preload

    def forget_absorbed(self, op_name: str) -> None:
        """Drop the preload of ``op_name`` if its space was absorbed (the operator is freed)."""
        preloaded = self._preloaded.get(op_name)
        if preloaded is not None and preloaded.absorbed:
            del self._preloaded[op_name]

    def distribute(self, op_name: str, layout: OpLayout) -> tuple[dict[int, np.ndarray], int]:
        """``distribute_data`` of ``execute(op)`` (Elk §4.5): every core of the allocated,
        preloaded operator (allocated under ``layout``) assembles each preloaded input's
        partition from the chunk in its own preload space and the chunks it reads from the
        preload space of its block peers (:func:`~runtime_sim.contract.preload_chunks.distribution`).
        Returns the partitions, ``{input: [cores, *partition shape]}``, and the bytes moved
        between cores; the preload is then done."""
        preloaded = self._preloaded.get(op_name)
        if preloaded is None or not preloaded.absorbed:
            raise DeviceProgramError(f"operator '{short_name(op_name)}' was not preloaded and allocated")
        n = layout.num_cores
        cores = np.arange(n)
        moved = 0
        assembled = {}
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
            assembled[t] = buf.reshape(n, s * ce)[:, :elems].reshape((n, *pshape)).copy()
        del self._preloaded[op_name]
        return assembled, moved

    def drop(self, name: str) -> None:
        """Forget a preload that will not execute, freeing its preload space."""
        preloaded = self._preloaded.pop(name)
        if not preloaded.absorbed:
            self._sram.preload[preloaded.layout.physical] -= preloaded.info.space_bytes_per_core

    def drop_all(self) -> None:
        """Forget every preload (the end of a region, even after an error)."""
        for name in list(self._preloaded):
            self.drop(name)
