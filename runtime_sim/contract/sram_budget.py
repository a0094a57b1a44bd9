"""The SRAM rule of a core: the one budget the compiler plans with and the device checks.

A core's SRAM (:attr:`~runtime_sim.contract.hardware.HardwareSpec.sram_bytes_per_core`) holds
two sides at every instant (Elk §2.2, Fig. 10; T10 §5):

* the *execution side*: the executing operator's partitions (its execution space, its own
  preloaded chunks absorbed), the live activations its region still needs, the model state
  resting on chip (``"resident"`` inputs, :func:`runtime_sim.contract.resting.resident_state`)
  and the shift buffer every core reserves (T10 §5 "multi-copy shift with buffer");
* the *preload side*: the preload space (:func:`runtime_sim.contract.preload_chunks.preload_bytes`
  of every preloaded input) of every operator preloaded and not yet executed (Elk §4.5).

Every design shares one SRAM between the two sides, except the ``"ideal"`` roofline (Elk §6.1:
preload and execution each have a full-sized on-chip memory), whose preload side has an SRAM
of its own of the same size; the shift buffer serves execution shifts only, so that SRAM holds
preload space alone.

The device checks the sides it has on its timeline with :func:`check_sram` (the functional
device at every preload and allocation, the timing simulator at every operator and every
preload start); the compiler budgets its windows with :func:`sram_budget`, whose figures are
the same rule with the shift buffer taken off the execution side up front (the compiler's
execution spaces and live bytes leave it out).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime_sim.contract.errors import SramOverflowError
from runtime_sim.contract.hardware import HardwareSpec

__all__ = ["IDEAL", "SramBudget", "check_sram", "separate_preload_sram", "sram_budget"]

#: The preload design whose preloads have their own SRAM and interconnect (Elk §6.1 roofline).
IDEAL = "ideal"


def separate_preload_sram(design: str | None) -> bool:
    """Whether preload space has an SRAM of its own under preload ``design`` (``None``: a
    run without a preload stream, whose off-chip inputs share the execution side)."""
    return design == IDEAL


@dataclass(frozen=True)
class SramBudget:
    """Bytes per core the compiler may fill on each side (the module docstring's rule).

    Attributes
    ----------
    execution_bytes : int
        Execution space + live activations + resident state, the shift buffer already taken
        off; when the preload side is shared, its preload space counts here too.
    preload_bytes : int
        Preload space of the operators preloaded and not yet executed, when the preload side
        has an SRAM of its own (``separate``); else equal to ``execution_bytes`` (the space is
        shared, and the sum of both sides is what fits).
    separate : bool
        Whether the preload side has its own SRAM (design ``"ideal"``).
    """

    execution_bytes: int
    preload_bytes: int
    separate: bool


def sram_budget(hw: HardwareSpec, design: str | None = None) -> SramBudget:
    """The per-core budgets of chip ``hw`` under preload ``design`` (see :class:`SramBudget`)."""
    execution = hw.sram_bytes_per_core - hw.shift_buffer_bytes
    separate = separate_preload_sram(design)
    return SramBudget(execution, hw.sram_bytes_per_core if separate else execution, separate)


def check_sram(op_name: str, hw: HardwareSpec, execution: np.ndarray, preload: np.ndarray | None = None,
               *, separate: bool = False, label: str = "", tensors: str = "") -> int:
    """Raise :class:`SramOverflowError` for the first core whose SRAM overflows; return the
    largest execution-side need (with the preload side when shared).

    Parameters
    ----------
    op_name : str
        The operator preloaded or executed at this instant (named in the error).
    hw : HardwareSpec
        The chip.
    execution : array
        The execution side per core, shift buffer and resident state included.
    preload : array, optional
        The preload space per core of every operator preloaded and not yet executed.
    separate : bool
        The preload side has its own SRAM (:func:`separate_preload_sram`): each side is
        checked alone against ``sram_bytes_per_core``; otherwise their sum is.
    label, tensors : str
        The operator's kind and tensors, for the message.
    """
    budget = hw.sram_bytes_per_core
    if preload is None:
        sides = (execution,)
    elif separate:
        sides = (execution, preload)
    else:
        sides = (execution + preload,)
    for side in sides:
        over = np.flatnonzero(side > budget)
        if over.size:
            core = int(over[0])
            raise SramOverflowError(op_name, core, budget, int(side[core]), label=label,
                                    chip=hw.name, tensors=tensors)
    return int(sides[0].max()) if sides[0].size else 0
