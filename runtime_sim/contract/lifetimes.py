"""Tensor lifetimes in a region and the SRAM they hold per core: the one definition.

The device keeps an operator's output on the cores that own it (ring 0 of its plan) until
its last reader has run; a region's outputs stay until the region ends, except those the host
reads (``DeviceProgram.host_outputs``): they travel to the host as their producer ends
(:func:`staying_outputs`), so a prefill's keys and values do not pile up on chip. A tensor read for the
last time by operator ``i`` is released before ``i`` runs (it moves into ``i``'s partitions).
The compiler budgets plans with it (:func:`held_bytes`) and preloads beside the held tensors
(:func:`held_between`), the functional device and the timing simulator account SRAM with it
(:func:`last_reads`, :func:`released`, :func:`outlives`).
"""

from __future__ import annotations

from typing import Iterable, Sequence


def staying_outputs(outputs: Iterable[str], host_outputs: Iterable[str]) -> tuple[str, ...]:
    """The region outputs held on chip until the region ends: all but those the host reads,
    which leave the chip as they are produced (or after their last reader in the region)."""
    leaving = set(host_outputs)
    return tuple(name for name in outputs if name not in leaving)


def last_reads(op_inputs: Sequence[Sequence[str]], region_outputs: Iterable[str]) -> dict[str, int]:
    """Tensor name -> index of the last operator reading it (``len(op_inputs)`` for
    ``region_outputs``, the :func:`staying_outputs`, which stay on chip until the region
    ends). Tensors never read are absent."""
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


def held_beside_later(op_inputs: Sequence[Sequence[str]], op_outputs: Sequence[str],
                      region_outputs: Iterable[str]) -> list[int]:
    """The operators whose output is held while a later operator other than the next one
    runs (read after the next operator, or a region output kept on chip): the outputs whose
    partition takes SRAM from the plans of other operators (:class:`HeldBytes`)."""
    last = last_reads(op_inputs, region_outputs)
    return [i for i, name in enumerate(op_outputs) if outlives(last, name, i + 1)]


def released(last: dict[str, int], held: Iterable[str], i: int) -> list[str]:
    """The ``held`` tensors to release before operator ``i`` runs (last read at ``i`` or before)."""
    return [name for name in held if not outlives(last, name, i)]


class HeldBytes:
    """Bytes per core of earlier outputs held on chip, operator by operator, as the outputs'
    sizes become known (a planner learns operator ``j``'s output size only once ``j`` is
    planned, and ``j``'s budget needs what ``0..j-1`` hold).

    :meth:`held` for operator ``i`` needs the sizes of every operator before ``i``
    (:meth:`add`, in order); the output of ``j`` counts while ``i`` runs when ``j < i`` and a
    later operator (or the region's outputs) still reads it. Linear in the region's size.
    """

    def __init__(self, op_inputs: Sequence[Sequence[str]], op_outputs: Sequence[str],
                 region_outputs: Iterable[str]) -> None:
        self._last = last_reads(op_inputs, region_outputs)
        self._outputs = list(op_outputs)
        self._n = len(op_inputs)
        # the output of j is held while j < i < last read: a difference array over i
        self._change = [0] * (self._n + 1)
        self._added = 0
        self._at = 0        # operators whose held bytes were summed so far
        self._total = 0

    def add(self, output_bytes: int) -> None:
        """The output partition bytes of the next operator (in region order)."""
        j = self._added
        end = min(self._last.get(self._outputs[j], -1), self._n)
        if end > j + 1:
            self._change[j + 1] += output_bytes
            self._change[end] -= output_bytes
        self._added += 1

    def held(self, i: int) -> int:
        """Bytes the operators added so far hold while operator ``i`` runs (``i`` no less
        than any earlier call's: the sum runs forward)."""
        if i < self._at - 1:
            raise ValueError(f"held bytes of operator {i} asked after operator {self._at - 1}")
        while self._at <= i:
            self._total += self._change[self._at]
            self._at += 1
        return self._total


def held_bytes(op_inputs: Sequence[Sequence[str]], op_outputs: Sequence[str],
               region_outputs: Iterable[str], output_bytes: Sequence[int]) -> list[int]:
    """Per operator ``i``, the bytes per core of earlier outputs still held while it runs.

    ``output_bytes[j]`` is the output partition bytes of operator ``j`` for the operators
    planned so far (it may be shorter than the region); the output of ``j < i`` counts while
    ``i`` runs when a later operator (or the region's outputs) still reads it
    (:class:`HeldBytes`).
    """
    n = len(op_inputs)
    tracker = HeldBytes(op_inputs, op_outputs, region_outputs)
    for b in output_bytes[:n]:
        tracker.add(b)
    # operators past the planned ones see only what the planned ones hold
    return [tracker.held(i) for i in range(n)]


def held_between(op_inputs: Sequence[Sequence[str]], op_outputs: Sequence[str],
                 region_outputs: Iterable[str], output_bytes: Sequence[int]) -> list[int]:
    """Per gap ``k = 0 .. n`` of a region of ``n`` operators, the bytes per core of outputs
    held from the end of operator ``k - 1`` to the start of operator ``k`` (``k = 0``: before
    the first, when the region holds nothing of its own yet; ``k = n``: after the last, what
    the region keeps to its end).

    An output is held from its producer's end while a later operator still reads it
    (:func:`outlives`): in a gap that includes the tensors operator ``k`` reads last, which
    it takes into its partitions only when it starts (:func:`released`), so a gap can hold
    more than :func:`held_bytes` counts beside either operator. Preloads issued between two
    executes sit beside exactly this (Elk §4.5; the devices' stream check,
    :func:`runtime_sim.contract.resting.stream_sram_peaks`). ``output_bytes[j]``: the output
    partition bytes of operator ``j`` (it may be shorter than the region, as for
    :func:`held_bytes`).
    """
    n = len(op_inputs)
    last = last_reads(op_inputs, region_outputs)
    change = [0] * (n + 2)
    for j, (name, b) in enumerate(zip(op_outputs[:n], output_bytes[:n])):
        if outlives(last, name, j):
            # held in the gaps after j while it outlives the operator before the gap
            change[j + 1] += b
            change[min(last[name], n) + 1] -= b
    out, total = [], 0
    for k in range(n + 1):
        total += change[k]
        out.append(total)
    return out
