"""What every core receives of a full tensor: its initial partition (T10 §4.4 "Sub-tensor placement").

Both ways a tensor reaches the cores go through :func:`partitions`: :meth:`Cores.place
<runtime_sim.functional.cores.Cores.place>` writes the whole partition into an allocated
operator's buffer, and :meth:`PreloadStore.preload_async
<runtime_sim.functional.preload_store.PreloadStore.preload_async>` keeps only each core's chunk of
the same partition (Elk §4.5), so a preloaded input is assembled into exactly what placing it
would have written. :func:`check_dtype` is the check every tensor entering the chip passes.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError, short_name
from runtime_sim.contract.expr import dtype_bytes, gather_rows
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout


def partitions(layout: OpLayout, tensor: int, arr: np.ndarray,
               rows: np.ndarray | None = None) -> np.ndarray:
    """Every numbered core's initial partition of input ``tensor`` of the full tensor ``arr``
    (T10 §4.4 placement), ``[cores, *partition shape]``; positions outside the tensor are 0.

    A gathered input (:class:`~runtime_sim.contract.expr.Gather`) is partitioned in its gathered
    view: the core's block of view positions, each reading row ``rows[ids position]`` of
    ``arr`` (``rows``: the call's ids resolved by :func:`~runtime_sim.contract.expr.gather_rows`)."""
    access = layout.expr.tensors[tensor]
    arr = access.block_of(arr)  # a viewed input: its block of the region tensor, in place
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


def gathered_rows(layout: OpLayout, tensor: int, arr: np.ndarray, ids: np.ndarray | None,
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


def check_dtype(hw: HardwareSpec, name: str, dtype: str, where: str, mask: bool = False,
                index: bool = False) -> None:
    """Refuse a tensor whose dtype chip ``hw`` does not hold.

    ``mask``: the tensor is only read, so it may be a bool mask (``MASK_DTYPES``);
    ``index``: it may hold gather ids (``INDEX_DTYPES``)."""
    hw.check_dtype(dtype, f"{where}: tensor '{short_name(name)}'", mask=mask, index=index)
    dtype_bytes(dtype)  # known size, or DeviceProgramError
