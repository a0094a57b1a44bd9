"""What a run reads from HBM: the one count behind ``hbm_bytes`` on both executors.

An operator reading an HBM input takes the boxes its cores hold
(:func:`~runtime_sim.contract.relayout.input_boxes`), each distinct box once however many
cores hold it (replicas are multicast from one read, Elk §5), :func:`distinct_read_bytes`.
For a gathered input (an embedding lookup whose table waits in HBM or DRAM) the boxes are in
the gathered view: the HBM serves one table row per id position, a repeated id read again,
as many rows as the device's gather places (one per view position). The count is therefore
``positions x row bytes`` whatever the ids' values: the timing simulator, which does not know
the ids, counts what the functional device gathers, with no expectation involved.

Across a region call, a tensor several operators read counts once (the most any of them
reads, :func:`call_reads`): under :func:`read_key`, a tensor, the block of it a split
operator's piece reads, or the rows a lookup's ids pick of it. The run's ``hbm_bytes`` sums
the calls (:func:`run_hbm_bytes`); the same name in two calls is two reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.relayout import Boxes, input_boxes

__all__ = ["call_reads", "distinct_read_bytes", "op_reads", "read_key", "run_hbm_bytes"]

#: The source (``TensorDecl.source``) these reads are of.
HBM = "hbm"


def read_key(expr: TensorExpr, t: int, names: tuple[str, ...]) -> str:
    """What input ``t`` of an operator (``expr``, its region tensors ``names``) is counted
    under: the tensor's name; for a viewed input (a split operator's share,
    :class:`~runtime_sim.contract.expr.TensorView`) the tensor's block, so that the blocks of
    one tensor read by several pieces add up; for a gathered input the table and the ids that
    pick its rows (two lookups with other ids read other rows; one that reads the whole
    table, a tied output projection, reads it besides)."""
    access = expr.inputs[t]
    name = names[t]
    if access.gather is not None:
        return f"{name}[{names[access.gather.ids]}]"
    if access.view is None:
        return name
    return f"{name}@{','.join(map(str, access.view.start))}+{','.join(map(str, access.shape))}"


def distinct_read_bytes(boxes: Boxes) -> float:
    """Bytes one copy of an input's boxes takes from its source: each distinct box once
    (:meth:`~runtime_sim.contract.relayout.Boxes.unique_bytes_per_chip` over one chip)."""
    return float(boxes.unique_bytes_per_chip(np.zeros(boxes.num_cores, np.int64), 1).sum())


def op_reads(layout: OpLayout, names: Sequence[str], sources: Sequence[str]) -> dict[str, float]:
    """What one operator (``layout``, its input names ``names`` and their ``sources``, from
    :func:`~runtime_sim.contract.stream.input_sources`) reads from HBM: :func:`read_key` ->
    :func:`distinct_read_bytes` of its boxes, the largest where two inputs share a key."""
    out: dict[str, float] = {}
    for t, source in enumerate(sources[:len(layout.expr.inputs)]):
        if source == HBM:
            key = read_key(layout.expr, t, tuple(names))
            out[key] = max(out.get(key, 0.0), distinct_read_bytes(input_boxes(layout, t)))
    return out


def call_reads(reads: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The reads of one region call from its operators' (:func:`read_key` -> bytes): a key
    read by several operators counts its largest read."""
    out: dict[str, float] = {}
    for one in reads:
        for key, nbytes in one.items():
            out[key] = max(out.get(key, 0.0), float(nbytes))
    return out


def run_hbm_bytes(calls: Iterable[Mapping[str, float]]) -> float:
    """A run's ``hbm_bytes``: the sum over its region calls of each call's reads
    (:func:`call_reads`)."""
    return float(sum(sum(c.values()) for c in calls))
