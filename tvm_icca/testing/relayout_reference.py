"""A brute-force reference for re-layout bytes: element masks instead of block geometry.

:func:`received_bytes` is what an operator's cores receive from other cores when an input
produced by an earlier operator is placed into their initial partitions: every element of a
core's partition that lies in the tensor and that the core did not already hold as part of
its producer's ring-0 output block. Tests compare it with what the executors count
(:mod:`runtime_sim.contract.resting`, ``relayout_bytes``), which uses box overlaps.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.contract.expr import dtype_bytes
from runtime_sim.contract.layout import OpLayout


def _masks(layout: OpLayout, t: int, cores: np.ndarray) -> dict[int, np.ndarray]:
    """Per core of ``cores`` (numbered = physical here), the elements of tensor ``t`` its
    initial partition covers, clipped to the tensor."""
    shape = tuple(int(s) for s in layout.expr.tensors[t].tensor_shape)
    starts = layout.partition_start(t, layout.partition(t, layout.chunk({})))
    starts = [np.broadcast_to(np.asarray(s, np.int64), (layout.num_cores,)) for s in starts]
    pshape = layout.partition_shape(t)
    out = {}
    for c in cores:
        mask = np.zeros(shape, bool)
        box = tuple(slice(max(int(s[c]), 0), max(int(s[c]) + int(p), 0)) for s, p in zip(starts, pshape))
        mask[box] = True
        out[int(c)] = mask
    return out


def received_bytes(producer: OpLayout, consumer: OpLayout, t: int) -> int:
    """Bytes the cores of ``consumer`` receive placing its input ``t``, the output of
    ``producer`` (both on cores ``0..n-1``), counted element by element."""
    out = len(producer.expr.tensors) - 1
    held = _masks(producer, out, np.asarray(producer.owners()))
    need = _masks(consumer, t, np.arange(consumer.num_cores))
    itemsize = dtype_bytes(consumer.expr.tensors[t].dtype)
    total = 0
    for core, mask in need.items():
        own = held.get(core)
        total += int((mask & ~own).sum() if own is not None else mask.sum())
    return total * itemsize
