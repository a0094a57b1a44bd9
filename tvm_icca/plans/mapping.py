"""Chip-aware mapping of a plan's sub-operators to physical cores (T10 §4.4, Elk §5).

A plan's ``core_order`` (:class:`runtime_sim.program.ExecutionPlan`) numbers its core grid:
row-major over the axes in that order (:attr:`runtime_sim.layout.OpLayout.grid`). Cores
``c * cores_per_chip ... (c + 1) * cores_per_chip - 1`` are chip ``c``, so on a multi-chip
system the order decides which sub-operators share a chip. With the expression's own order,
the batch axis is outermost: a weight-matmul plan that splits the batch in two puts the two
replicas of every weight block ``num_cores / 2`` cores apart, on different chips, and each
chip reads its copy from its own HBM. With the axes a tensor lacks innermost, the replicas of
each of its sub-tensors are neighbouring cores on one chip: one HBM read, forwarded on chip.

The candidate orders are the expression's own and, per tensor, the one with the axes that
tensor lacks moved innermost (its replicas contiguous); for an output, those are the split
reduction axes, whose partial sums then meet on one chip. Each is costed exactly on the
plan's cores, with the data the timing simulator moves (:mod:`runtime_sim.timing`):

* HBM: the distinct input boxes each chip needs of every ``"hbm"`` input (what the chip reads
  from its own HBM, :meth:`~runtime_sim.timing.geometry.Boxes.unique_bytes_per_chip`), the
  busiest chip at its share of the HBM bandwidth;
* inter-chip bytes at ``hw.inter_chip_bandwidth``: rotation shifts whose source core is on
  another chip, partial sums sent to an owner on another chip, and the copies of the other
  inputs' distinct boxes beyond the first that must reach a second chip.

The cheapest order wins; ties keep the expression's own order, and a plan on one chip's
cores (or a single-chip system) keeps it too, so nothing changes there. Only the mapping is
chosen here: the plan itself (``F_op``, temporal factors, loop order) comes from the exact
search, whose cost model is chip-unaware.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from runtime_sim.hardware import HardwareSpec
from runtime_sim.layout import OpLayout
from runtime_sim.program import ExecutionPlan, TensorExpr
from runtime_sim.timing.geometry import input_boxes


@dataclass(frozen=True)
class MappingCost:
    """What a core order costs on a multi-chip system (seconds and bytes)."""

    hbm_s: float
    inter_chip_s: float
    hbm_read_bytes: float  # read from HBM, a copy per chip that needs a block
    hbm_unique_bytes: float  # distinct HBM bytes of the inputs
    inter_chip_bytes: float

    @property
    def time_s(self) -> float:
        return self.hbm_s + self.inter_chip_s


def candidate_core_orders(layout: OpLayout) -> list[tuple[str, ...]]:
    """The expression's own order (``()``), then per tensor its lacking axes innermost.

    Orders that number the cores the same way (they differ only in unsplit axes) count once.
    """
    axes = layout.axes
    split = [a for a in axes if layout.F[a] > 1]
    seen = {tuple(split)}
    out: list[tuple[str, ...]] = [()]
    for t in range(len(layout.expr.tensors)):
        own = set(layout.tensor_axes(t))
        order = tuple([a for a in axes if a in own] + [a for a in axes if a not in own])
        key = tuple(a for a in order if layout.F[a] > 1)
        if key not in seen:
            seen.add(key)
            out.append(order)
    return out


def mapping_cost(layout: OpLayout, hw: HardwareSpec, hbm_inputs: Sequence[int] = ()) -> MappingCost:
    """The chip-level cost of ``layout``'s core numbering (see the module doc)."""
    chips = hw.num_chips
    n = layout.num_cores
    chip = np.arange(n) // hw.cores_per_chip
    expr = layout.expr
    hbm = set(int(t) for t in hbm_inputs)
    per_chip_hbm = np.zeros(chips)
    hbm_unique = 0.0
    inter = 0.0
    for t in range(len(expr.inputs)):
        boxes = input_boxes(layout, t)
        per_chip = boxes.unique_bytes_per_chip(chip, chips)
        distinct = float(boxes.unique_bytes_per_chip(np.zeros(n, np.int64), 1).sum())
        if t in hbm:
            per_chip_hbm += per_chip
            hbm_unique += distinct
        else:
            inter += float(per_chip.sum()) - distinct
    for t in range(len(expr.tensors)):
        for a in layout.temporal_axes(t):
            src = layout.shift_sources(t, a)
            crossing = int(np.count_nonzero(chip[src] != chip))
            inter += crossing * layout.shift_count_per_core(t, a) * layout.partition_bytes(t)
    out = len(expr.tensors) - 1
    owner = layout.output_owner_of()
    inter += int(np.count_nonzero(chip[owner] != chip)) * layout.partition_bytes(out)
    hbm_s = 0.0
    if hbm and hw.hbm_bandwidth > 0:
        hbm_s = float(per_chip_hbm.max()) / (hw.hbm_bandwidth / chips)
    inter_s = inter / hw.inter_chip_bandwidth if inter and hw.inter_chip_bandwidth > 0 else 0.0
    return MappingCost(hbm_s, inter_s, float(per_chip_hbm.sum()), hbm_unique, float(inter))


def choose_core_order(expr: TensorExpr, plan: ExecutionPlan, hw: HardwareSpec,
                      hbm_inputs: Sequence[int] = ()) -> ExecutionPlan:
    """``plan`` with the cheapest core order of :func:`candidate_core_orders` (module doc).

    ``hbm_inputs``: indices (in ``expr.inputs``) of the inputs read from HBM. On one chip, or
    when the plan fits on the first chip's cores, the plan is returned unchanged.
    """
    if hw.num_chips <= 1 or plan.num_cores <= hw.cores_per_chip:
        return plan
    base = OpLayout(expr, replace(plan, core_order=()))
    best, best_s = plan, None
    for order in candidate_core_orders(base):
        layout = base if not order else OpLayout(expr, replace(plan, core_order=order))
        cost = mapping_cost(layout, hw, hbm_inputs).time_s
        if best_s is None or cost < best_s * (1 - 1e-9):
            best, best_s = replace(plan, core_order=order), cost
    return best
