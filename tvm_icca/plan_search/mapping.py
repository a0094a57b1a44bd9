"""Chip-aware mapping of a plan's sub-operators to physical cores (T10 §4.4, Elk §5).

A plan's ``core_order`` (:class:`runtime_sim.contract.plan.ExecutionPlan`) numbers its core grid:
row-major over the axes in that order (:attr:`runtime_sim.contract.layout.OpLayout.grid`). Cores
``c * cores_per_chip ... (c + 1) * cores_per_chip - 1`` are chip ``c``, so on a multi-chip
system the order decides which sub-operators share a chip. With the expression's own order,
the batch axis is outermost: a weight-matmul plan that splits the batch in two puts the two
replicas of every weight block ``num_cores / 2`` cores apart, on different chips, and each
chip reads its copy from its own HBM. With the axes a tensor lacks innermost, the replicas of
each of its sub-tensors are neighbouring cores on one chip: one HBM read, forwarded on chip.

A plan may also be spread over the chips (``ExecutionPlan.chips``,
:attr:`runtime_sim.contract.layout.OpLayout.physical`): its numbered cores split into equal contiguous
groups, one at the start of each chip. Without it a plan smaller than the system sits on
cores ``0 ..`` -- all on chip 0 when it fits there -- and every byte its producer left on
the other chips crosses the IPU-Links (the softmax reductions of an LLM's attention).

The candidate orders are the expression's own and, per tensor, the one with the axes that
tensor lacks moved innermost (its replicas contiguous); for an output, those are the split
reduction axes, whose partial sums then meet on one chip. When an input comes from a
producer, each split axis moved outermost is a candidate too (the chips then split that
axis, as the producer may have left the data). Each order is a candidate with the
contiguous placement (only the own order when the plan fits on one chip: the others put it
on the same chip) and, when the cores divide evenly over all chips, spread over them. Each
candidate is costed exactly on the plan's physical cores, with the data the timing
simulator moves (:mod:`runtime_sim.timing`, whose geometry lives in
:mod:`runtime_sim.contract.layout`):

* HBM: the distinct input boxes each chip needs of every ``"hbm"`` input (what the chip reads
  from its own HBM, :meth:`~runtime_sim.contract.relayout.Boxes.unique_bytes_per_chip`), the busiest
  chip at its share of the HBM bandwidth;
* inter-chip bytes at ``hw.inter_chip_bandwidth``: rotation shifts whose source core is on
  another chip, partial sums sent to an owner on another chip; for an input produced by an
  earlier operator of the region (``producers``: its layout), the re-layout from the
  producer's output blocks (:func:`~runtime_sim.contract.relayout.producer_grid`) onto the candidate's
  cores, each piece counted once per chip other than its owner's that needs it (the
  multicast the timing simulator sends, :func:`~runtime_sim.contract.relayout.relayout`); for any other
  on-chip input, the copies of its distinct boxes beyond the first that must reach a second
  chip.

The cheapest candidate wins; ties keep the expression's own order on contiguous cores, and a
single-chip system keeps it always, so nothing changes there. Only the mapping is chosen
here: the plan itself (``F_op``, temporal factors, loop order) comes from the exact search,
whose cost model is chip-unaware, and on several chips from the chip-aware choice among its
fastest plans (:func:`.search.plan_operator`), which adds each plan's inter-chip seconds
under its best placement (:func:`best_placement`) to its time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Hashable, Sequence

import numpy as np

from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.relayout import BlockGrid, input_boxes, input_relayout, producer_grid

#: An input produced by an earlier operator of the region: (index in ``expr.inputs``, the
#: producer's layout).
Producer = tuple[int, OpLayout]


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


def candidate_core_orders(layout: OpLayout, outermost: bool = False) -> list[tuple[str, ...]]:
    """The expression's own order (``()``), then per tensor its lacking axes innermost, then
    the ring axes of every rotating tensor innermost (the heaviest rings innermost); with
    ``outermost``, then each split axis moved outermost (the chips then split that axis, which
    matches a producer that left the data split along it over the chips).

    A rotating tensor's ring is the cores that differ only in the axes it lacks; when two
    tensors rotate (a down projection rotating both operands along its reduction) each
    one's own order leaves the other's rings strided across chips, while both sets of ring
    axes innermost keep every ring within ``prod F`` of those axes' cores, on one chip when
    that many fit. Orders that number the cores the same way (they differ only in unsplit
    axes) count once.
    """
    axes = layout.axes
    split = [a for a in axes if layout.F[a] > 1]
    seen = {tuple(split)}
    out: list[tuple[str, ...]] = [()]
    orders = []
    rings: dict[str, float] = {}  # ring axis -> bytes a core shifts around rings along it
    for t in range(len(layout.expr.tensors)):
        own = set(layout.tensor_axes(t))
        orders.append(tuple([a for a in axes if a in own] + [a for a in axes if a not in own]))
        shifted = sum(layout.shift_count_per_core(t, a) for a in layout.temporal_axes(t))
        for a in split:
            if shifted and a not in own:
                rings[a] = rings.get(a, 0.0) + shifted * layout.partition_bytes(t)
    if len(rings) > 1:
        orders.append(tuple([a for a in axes if a not in rings] + sorted(rings, key=lambda a: rings[a])))
    if outermost:
        orders += [tuple([a] + [b for b in axes if b != a]) for a in split]
    for order in orders:
        key = tuple(a for a in order if layout.F[a] > 1)
        if key not in seen:
            seen.add(key)
            out.append(order)
    return out


def mapping_cost(layout: OpLayout, hw: HardwareSpec, hbm_inputs: Sequence[int] = (),
                 producers: Sequence[Producer] = ()) -> MappingCost:
    """The chip-level cost of ``layout``'s placement on physical cores (see the module doc).

    ``layout`` must know the chip (``OpLayout(expr, plan, hw.cores_per_chip)``) when its plan
    is spread; ``producers`` are the layouts of the inputs produced in the region.
    """
    hbm_max, hbm_read, hbm_unique, inter = _mapping_bytes(layout, hw, hbm_inputs, producers)
    hbm_s, inter_s = _mapping_seconds(hbm_max, inter, hw, hbm_inputs)
    return MappingCost(hbm_s, inter_s, hbm_read, hbm_unique, inter)


def _mapping_bytes(layout: OpLayout, hw: HardwareSpec, hbm_inputs: Sequence[int],
                   producers: Sequence[Producer]) -> tuple[float, float, float, float]:
    """The bytes of :func:`mapping_cost`: the most one chip reads from HBM, the HBM reads of
    all chips, the distinct HBM bytes and the bytes crossing chips (no bandwidth is read:
    :data:`.hw_fields.PLACEMENT_FIELDS`)."""
    chips = hw.num_chips
    n = layout.num_cores
    cpc = hw.cores_per_chip
    chip = layout.chip_of_core(cpc)
    expr = layout.expr
    hbm = set(int(t) for t in hbm_inputs)
    produced = {int(t): p for t, p in producers}
    per_chip_hbm = np.zeros(chips)
    hbm_unique = 0.0
    inter = 0.0
    for t in range(len(expr.inputs)):
        if t in produced and t not in hbm:
            inter += relayout_inter_chip_bytes(produced[t], layout, t, hw)
            continue
        boxes = input_boxes(layout, t)
        per_chip = boxes.unique_bytes_per_chip(chip, chips)
        distinct = float(boxes.unique_bytes_per_chip(np.zeros(n, np.int64), 1).sum())
        if t in hbm:
            per_chip_hbm += per_chip
            hbm_unique += distinct
        else:
            inter += float(per_chip.sum()) - distinct
    inter += rotation_inter_chip_bytes(layout, cpc)
    owner = layout.output_owner_of()
    inter += int(np.count_nonzero(chip[owner] != chip)) * layout.replica_bytes()
    return float(per_chip_hbm.max()), float(per_chip_hbm.sum()), hbm_unique, float(inter)


def _mapping_seconds(hbm_max: float, inter: float, hw: HardwareSpec,
                     hbm_inputs: Sequence[int]) -> tuple[float, float]:
    """``(HBM seconds, inter-chip seconds)`` of a placement's bytes (:func:`_mapping_bytes`):
    the busiest chip at its share of the HBM bandwidth, the crossings at the inter-chip
    bandwidth (:func:`.hw_fields.placement_rates`)."""
    hbm_s = 0.0
    if len(hbm_inputs) and hw.hbm_bandwidth > 0:
        hbm_s = hbm_max / (hw.hbm_bandwidth / hw.num_chips)
    inter_s = inter / hw.inter_chip_bandwidth if inter and hw.inter_chip_bandwidth > 0 else 0.0
    return hbm_s, inter_s


def rotation_inter_chip_bytes(layout: OpLayout, cores_per_chip: int) -> float:
    """Bytes ``layout``'s rotations send between chips over the whole operator: every shift
    whose source core is on another chip, as often as the core shifts that tensor (the
    inter-chip fabric carries each one, whichever step it falls in)."""
    chip = layout.chip_of_core(cores_per_chip)
    inter = 0.0
    for t in range(len(layout.expr.tensors)):
        for a in layout.temporal_axes(t):
            src = layout.shift_sources(t, a)
            crossing = int(np.count_nonzero(chip[src] != chip))
            inter += crossing * layout.shift_count_per_core(t, a) * layout.partition_bytes(t)
    return float(inter)


def relayout_inter_chip_bytes(producer: OpLayout, layout: OpLayout, t: int, hw: HardwareSpec) -> float:
    """Bytes that cross chips when input ``t`` of ``layout`` comes from ``producer``'s output:
    every piece of the re-layout once per chip, other than its owner's, whose cores need it."""
    cpc = hw.cores_per_chip
    if producer.chips > 1 and producer.cores_per_chip is None:
        producer = OpLayout(producer.expr, producer.plan, cpc)
    grid = producer_grid(producer)
    boxes = input_boxes(layout, t).placed(layout.physical, layout.span)
    span = max(layout.span, int(grid.owner.max()) + 1)
    rl = input_relayout(grid, layout, t, np.arange(span) // cpc, hw.num_chips, boxes=boxes)
    return rl.inter_chip_bytes(cpc)


def unplaced_inter_chip_bytes(layout: OpLayout, t: int, hw: HardwareSpec) -> float:
    """Bytes of input ``t`` that cross chips to reach ``layout``'s cores when its producer's
    layout is not known yet (an operator cut into pieces before its region is planned,
    :mod:`tvm_icca.split.split_choice`): the producer assumed to leave its output spread
    evenly over the chips, each chip receives from the others ``(C - 1) / C`` of the
    distinct bytes its cores read."""
    chips = hw.num_chips
    if chips <= 1:
        return 0.0
    chip = layout.chip_of_core(hw.cores_per_chip)
    per_chip = input_boxes(layout, t).unique_bytes_per_chip(chip, chips)
    return float(per_chip.sum()) * (chips - 1) / chips


def arrival_seconds(layout: OpLayout, hw: HardwareSpec, arriving: Sequence[int],
                    producers: Sequence[Producer] = ()) -> float:
    """Seconds the ``arriving`` inputs (produced by earlier operators) take to reach
    ``layout``'s partitions before its first step: the re-layout the timing simulator
    charges, which its own estimate leaves out (T10 §5, "the program may rearrange the
    data"). The slower of the cores' links (each receives its partitions, as
    :class:`.batch_cost.ArrivalCostModel` prices them) and the inter-chip fabric (the bytes
    crossing chips: from a producer's layout when ``producers`` gives it,
    :func:`relayout_inter_chip_bytes`, else :func:`unplaced_inter_chip_bytes`), as the
    simulator's phases take the slower of the two."""
    arriving = sorted({int(t) for t in arriving})
    if not arriving:
        return 0.0
    link_s = sum(layout.partition_bytes(t) for t in arriving) / hw.link_bandwidth
    if hw.num_chips <= 1 or hw.inter_chip_bandwidth <= 0:
        return link_s
    produced = {int(t): p for t, p in producers}
    inter = sum(relayout_inter_chip_bytes(produced[t], layout, t, hw) if t in produced
                else unplaced_inter_chip_bytes(layout, t, hw) for t in arriving)
    return max(link_s, inter / hw.inter_chip_bandwidth)


def producer_key(producers: Sequence[Producer]) -> tuple[Hashable, ...]:
    """What the mapping of a consumer depends on in its producers (for cache keys)."""
    return tuple((int(t), p.expr.structure_key(views=False),
                  json.dumps(p.plan.to_dict(), sort_keys=True, separators=(",", ":")))
                 for t, p in sorted(producers, key=lambda x: x[0]))


def candidate_placements(layout: OpLayout, hw: HardwareSpec,
                         producers: Sequence[Producer] = (),
                         in_place: Sequence[int] = ()) -> list[tuple[tuple[str, ...], int]]:
    """``(core_order, chips)`` candidates: contiguous first, then spread over all chips
    (orders of :func:`candidate_core_orders`, with the split axes outermost when some input
    comes from a producer), then, per produced input in ``in_place`` (those the plan search
    priced as found in place, :class:`.batch_cost.InPlace`), the placement that numbers the
    cores as its producer left it (:func:`producer_numbering`)."""
    orders = candidate_core_orders(layout, outermost=bool(producers))
    n, cpc, k = layout.num_cores, hw.cores_per_chip, hw.num_chips
    out = [(o, 1) for o in (orders if n > cpc else orders[:1])]
    if k > 1 and n % k == 0 and n // k <= cpc and n >= k:
        out += [(o, k) for o in orders]
    split = {a for a in layout.axes if layout.F[a] > 1}
    for t, source in producers:
        if t not in in_place or source.num_cores != n:
            continue
        dims = [a.terms[0][0] if a.is_simple else None for a in layout.expr.inputs[t].indices]
        numbering = producer_numbering(source)
        if numbering is None or None in dims or len(set(dims)) < len(dims) or not split <= set(dims):
            continue
        dim_order, chips = numbering
        order = tuple([dims[d] for d in dim_order] + [a for a in layout.axes if a not in dims])
        if (order, chips) not in out:
            out.append((order, chips))
    return out


def producer_numbering(layout: OpLayout,
                       grid: BlockGrid | None = None) -> tuple[tuple[int, ...], int] | None:
    """How ``layout`` numbers the cores that own its output, when it owns it as contiguous
    blocks: ``(dims, chips)`` such that block ``b`` (per output dimension) sits on the
    physical core a plan spread over ``chips`` chips numbers ``b`` row-major over ``dims``
    (outermost first), one block per core. A reader that splits the tensor into the same
    blocks, unreplicated and unrotated, and numbers its cores this way finds every block
    in place. ``None`` when no such numbering exists (a split reduction, replicas, a merged
    output dimension). ``grid``: the layout's :func:`producer_grid`, when the caller has it."""
    grid = producer_grid(layout) if grid is None else grid
    n = int(np.prod(grid.counts))
    out = layout.expr.output
    if n != layout.num_cores or not all(i.is_simple for i in out.indices):
        return None
    axes = [i.terms[0][0] for i in out.indices]
    order = layout.core_order
    dims = tuple(sorted(range(len(axes)), key=lambda d: order.index(axes[d])))
    blocks = np.indices(grid.counts).reshape(len(grid.counts), -1)
    numbered = np.ravel_multi_index(tuple(blocks[d] for d in dims),
                                    tuple(grid.counts[d] for d in dims))
    if not np.array_equal(grid.owner, layout.physical[numbered]):
        return None
    return dims, layout.chips


#: One candidate placement of a plan (:func:`placement_bytes`): the plan with its
#: ``core_order`` and ``chips``, the most bytes one chip reads from HBM, the bytes crossing chips.
Placement = tuple[ExecutionPlan, float, float]


def placement_bytes(expr: TensorExpr, plan: ExecutionPlan, hw: HardwareSpec,
                    hbm_inputs: Sequence[int] = (),
                    producers: Sequence[Producer] = (),
                    in_place: Sequence[int] = ()) -> list[Placement]:
    """Every candidate placement of ``plan`` (:func:`candidate_placements`) with its bytes
    (:func:`mapping_cost`'s, before any bandwidth divides them): what
    :func:`choose_core_order` chooses among, and what a plan cache keeps across chips that
    differ only in their bandwidths (:data:`.hw_fields.PLACEMENT_FIELDS`)."""
    cpc = hw.cores_per_chip
    base = OpLayout(expr, replace(plan, core_order=(), chips=1), cpc)
    out: list[Placement] = []
    for order, chips in candidate_placements(base, hw, producers, in_place):
        candidate = replace(plan, core_order=order, chips=chips)
        layout = base if not order and chips == 1 else OpLayout(expr, candidate, cpc)
        hbm_max, _, _, inter = _mapping_bytes(layout, hw, hbm_inputs, producers)
        out.append((candidate, hbm_max, inter))
    return out


def best_placement(plan: ExecutionPlan, placements: Sequence[Placement], hw: HardwareSpec,
                   hbm_inputs: Sequence[int] = ()) -> tuple[ExecutionPlan, float, float]:
    """The cheapest of ``placements`` (:func:`placement_bytes` of ``plan``) on ``hw``'s
    bandwidths (:func:`mapping_cost`'s ``time_s``: the busiest chip's HBM reads and the
    bytes crossing chips), with its HBM and inter-chip seconds; ties keep the earlier
    candidate (the expression's own order, contiguous). ``(plan, 0, 0)`` without candidates."""
    best, best_s, parts = plan, None, (0.0, 0.0)
    for candidate, hbm_max, inter in placements:
        hbm_s, inter_s = _mapping_seconds(hbm_max, inter, hw, hbm_inputs)
        cost = hbm_s + inter_s
        if best_s is None or cost < best_s * (1 - 1e-9):
            best, best_s, parts = candidate, cost, (hbm_s, inter_s)
    return best, float(parts[0]), float(parts[1])


def pick_placement(plan: ExecutionPlan, placements: Sequence[Placement], hw: HardwareSpec,
                   hbm_inputs: Sequence[int] = ()) -> ExecutionPlan:
    """The cheapest of ``placements`` (:func:`best_placement`)."""
    return best_placement(plan, placements, hw, hbm_inputs)[0]


def choose_core_order(expr: TensorExpr, plan: ExecutionPlan, hw: HardwareSpec,
                      hbm_inputs: Sequence[int] = (),
                      producers: Sequence[Producer] = ()) -> ExecutionPlan:
    """``plan`` with the cheapest placement of :func:`candidate_placements`: core order and
    spread over chips (module doc).

    ``hbm_inputs``: indices (in ``expr.inputs``) of the inputs read from HBM; ``producers``:
    ``(index, layout)`` of the inputs produced by earlier operators of the region. On one
    chip the plan is returned unchanged.
    """
    if hw.num_chips <= 1:
        return plan
    hbm_inputs = tuple(hbm_inputs)
    return pick_placement(plan, placement_bytes(expr, plan, hw, hbm_inputs, producers), hw,
                          hbm_inputs)
