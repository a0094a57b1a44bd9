"""Tensor lifetimes in a region and the SRAM they hold per core: the one definition.

The device keeps an operator's output on the cores that own it (ring 0 of its plan) until
its last reader has run; a region's outputs stay until the region ends. A tensor read for the
last time by operator ``i`` is released before ``i`` runs (it moves into ``i``'s partitions).
The compiler budgets plans with it (:func:`held_bytes`), the functional device and the timing
simulator account SRAM with it (:func:`last_reads`, :func:`released`, :func:`outlives`).
"""

from __future__ import annotations

from typing import Iterable, Sequence


def last_reads(op_inputs: Sequence[Sequence[str]], region_outputs: Iterable[str]) -> dict[str, int]:
    """Tensor name -> index of the last operator reading it (``len(op_inputs)`` for region
    outputs, which stay on chip until the region ends). Tensors never read are absent."""
    last: dict[str, int] = {}
    for i, names in enumerate(op_inputs):
        for name in names:
            last[name] = i
    for name in region_outputs:
        last[name] = len(op_inputs)
    return last


def outlives(last: dict[str, int], name: str, i: int) -> bool:
    """Whether tensor ``name`` is still needed after operator ``i`` (so it is held on chip)."""
    return last.get(name, -1) > i


def released(last: dict[str, int], held: Iterable[str], i: int) -> list[str]:
    """The ``held`` tensors to release before operator ``i`` runs (last read at ``i`` or before)."""
    return [name for name in held if not outlives(last, name, i)]


def held_bytes(op_inputs: Sequence[Sequence[str]], op_outputs: Sequence[str],
               region_outputs: Iterable[str], output_bytes: Sequence[int]) -> list[int]:
    """Per operator ``i``, the bytes per core of earlier outputs still held while it runs.

    ``output_bytes[j]`` is the output partition bytes of operator ``j`` for the operators
    planned so far (it may be shorter than the region); the output of ``j < i`` counts while
    ``i`` runs when a later operator (or the region's outputs) still reads it.
    """
    last = last_reads(op_inputs, region_outputs)
    n = len(op_inputs)
    # the output of j is held while j < i < last read: one sweep over a difference array
    # (a region may hold a whole model's layers; a sum per (i, j) pair is cubic for the planner)
    change = [0] * (n + 1)
    for j, b in enumerate(output_bytes[:n]):
        end = min(last.get(op_outputs[j], -1), n)
        if end > j + 1:
            change[j + 1] += b
            change[end] -= b
    held, total = [], 0
    for i in range(n):
        total += change[i]
        held.append(total)
    return held
