"""Operators that play one part in a region's repeated blocks (an LLM's layers).

A model lowered as one region repeats its layers: the up projection of layer 7 is the same
operator as layer 3's, reading and feeding the same kinds of neighbours at the same
distances. When the split stage learns that one of them must be cut (the planner found no
plan for it, or the intermediates held beside it fill the SRAM), its twins in the other
layers are in the same position: :func:`twin_groups` lets the decision reach them all in one
round of planning instead of one round per layer (:func:`~tvm_icca.model_pass.region_plans.plan_split_region`).

Two operators are twins when they have the same tensor expression (up to tensor names), the
same label, and the same surroundings: each input produced by the operator the same number of
places before (or both read from outside the region), the readers of the output at the same
distances after, and both or neither kept as a region output. This is local: a layer whose
first operator reads the embedding instead of the previous layer's residual still matches
the others everywhere else.
"""

from __future__ import annotations

from typing import Hashable

from tvm_icca.lower.region import RegionOps


def part_signature(region: RegionOps, i: int, producer: dict[str, int],
                   readers: dict[str, list[int]]) -> Hashable:
    """What operator ``i`` of ``region`` is and where it sits, without tensor names."""
    op = region.ops[i]
    inputs = tuple(i - producer[n] if n in producer else None for n in op.input_names)
    after = tuple(k - i for k in readers.get(op.output_name, ()))
    return (op.expr.structure_key(views=False), op.label, inputs, after,
            op.output_name in region.outputs)


def twin_groups(region: RegionOps) -> list[tuple[int, ...]]:
    """Per operator of ``region``, the indices of its twins (itself included), in order."""
    producer = {op.output_name: j for j, op in enumerate(region.ops)}
    readers: dict[str, list[int]] = {}
    for k, op in enumerate(region.ops):
        for name in dict.fromkeys(op.input_names):
            readers.setdefault(name, []).append(k)
    groups: dict[Hashable, list[int]] = {}
    keys = [part_signature(region, i, producer, readers) for i in range(len(region.ops))]
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return [tuple(groups[key]) for key in keys]
